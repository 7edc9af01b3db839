#!/usr/bin/env bash
# Runs tests/integration/test_openvino.py in an environment of its own, .venv-openvino:
# inferplex with the onnxruntime-openvino package in place of onnxruntime. Both packages
# install the module `onnxruntime`, so they cannot share .venv. Wheels of
# onnxruntime-openvino exist for x86_64 Linux only; elsewhere this says so and runs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "$(uname -m)" != x86_64 ]]; then
  echo "openvino: no onnxruntime-openvino wheels for $(uname -m); test_openvino.py not run"
  exit 0
fi
PYTHON=${PYTHON:-python3}
VENV=.venv-openvino
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e . pytest pytest-asyncio
# inferplex's dependencies bring the plain onnxruntime: swap it for the OpenVINO build (forced,
# as uninstalling the one removes files the other shares when both were installed)
"$VENV/bin/python" -m pip uninstall --quiet --yes onnxruntime
"$VENV/bin/python" -m pip install --quiet --force-reinstall --no-deps "onnxruntime-openvino==1.24.1"
exec "$VENV/bin/python" -m pytest tests/integration/test_openvino.py "$@"
