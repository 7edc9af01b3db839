#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "test,examples,dev,deploy,torch,llm"
scripts/system_packages.sh
.venv/bin/ruff check src tests examples bench scripts
.venv/bin/ruff format --check src tests examples bench scripts
.venv/bin/mypy
.venv/bin/lint-imports  # the rooms' layers, no import cycles: pyproject.toml [tool.importlinter]
# the OpenVINO execution provider needs an onnxruntime build of its own, in its own venv
scripts/openvino_test.sh -q
exec .venv/bin/python -m pytest "$@"
