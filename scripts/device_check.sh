#!/usr/bin/env bash
# Run ON THE DEVICE MACHINE (one call of the device tool, after scripts/device_wheels.sh here):
# the GPU paths of the backends (torch CUDA instances, ONNX Runtime's CUDA and TensorRT
# providers where its build has them, the GPU memory probe), with the image's python3 and
# the carried wheels. The tests of those paths skip on a machine without a GPU, as in CI.
# The log also goes to $OUT/device_check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD/src:$PWD" PYTHONUNBUFFERED=1
LOG="${OUT:-/tmp}/device_check.log"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 - <<'PY'
import onnxruntime, torch
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", cuda, torch.cuda.get_device_name(0) if cuda else "")
print("onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
PY
  timeout 420 python3 -m pytest -p no:cacheprovider -q -rs \
    tests/unit/backends/test_pytorch.py tests/integration/test_pytorch.py \
    tests/unit/backends/test_ort_providers.py tests/unit/lifecycle/test_gpu_memory.py
} 2>&1 | tee "$LOG"
