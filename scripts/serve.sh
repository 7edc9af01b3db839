#!/usr/bin/env bash
# Sets everything up on a fresh machine, builds the example models and serves them.
# Extra arguments go to `inferplex serve` (e.g. --http-port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh "examples"
.venv/bin/python -m examples.build_models --out examples/models
exec .venv/bin/inferplex serve --model-repository examples/models "$@"
