#!/usr/bin/env bash
# Creates .venv (if missing) and installs inferplex with the given extras into it.
# Usage: scripts/bootstrap.sh EXTRAS   (e.g. "test,examples")
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[${1:-test}]"
