#!/usr/bin/env bash
# Runs tests/integration/test_openvino.py in an environment of its own, .venv-openvino:
# inferplex's core dependencies with onnxruntime-openvino in place of onnxruntime, and pytest.
# Both packages provide the module `onnxruntime` and must never be installed together, so the
# swap happens in the dependency list before anything is installed (as deploy/docker/
# Dockerfile.gpu does for onnxruntime-gpu). Wheels of onnxruntime-openvino exist for x86_64
# Linux only; elsewhere this says so and runs nothing.
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
"$VENV/bin/python" - > "$VENV/requirements.txt" <<'PY'
import re
import tomllib

with open("pyproject.toml", "rb") as f:
    dependencies = tomllib.load(f)["project"]["dependencies"]
print("\n".join(re.sub(r"^onnxruntime(?=[<>=!~ ;]|$)", "onnxruntime-openvino", d) for d in dependencies))
PY
grep -q '^onnxruntime-openvino' "$VENV/requirements.txt"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r "$VENV/requirements.txt" pytest pytest-asyncio
"$VENV/bin/python" -m pip install --quiet --no-deps -e .
exec "$VENV/bin/python" -m pytest tests/integration/test_openvino.py "$@"
