#!/usr/bin/env bash
# Install a real Triton Inference Server 2.51 and Triton's perf_analyzer 2.51 under $PEERS
# (default /tmp/inferplex-peers) for bench/vs_triton.py; nothing is installed system-wide.
# Running it again changes nothing once everything is in place.
#
#   triton-venv/       nvidia-pytriton 0.7.0, whose wheel bundles the tritonserver 2.51 binary
#                      and Triton's Python backend (Triton's own ONNX Runtime backend is on no
#                      package registry), with onnxruntime and numpy for the models' model.py
#   backends/python/   the Python backend laid out as tritonserver's --backend-directory wants
#                      it, with the backend stub built for Python 3.11
#   pa-venv/           tritonclient 2.51.0, the last wheel whose perf_analyzer runs on glibc
#                      2.36 (Debian 12), and nvidia-cuda-runtime-cu12: the binary links
#                      libcudart but uses no GPU
#   lib/               libb64.so.0d from Debian's package, only where the system has none
#   bin/tritonserver, bin/perf_analyzer   wrappers that set the library paths
#
# Usage: bench/peers/install.sh        (PEERS=DIR and PYTHON=python3.11 override the defaults)
set -euo pipefail

PEERS=${PEERS:-/tmp/inferplex-peers}
PYTHON=${PYTHON:-python3}
mkdir -p "$PEERS/bin" "$PEERS/lib"

# a venv at $1 with the packages $3...; skipped when the import check $2 passes
venv() {
  local dir=$1 check=$2
  shift 2
  if ! "$dir/bin/python" -c "$check" 2>/dev/null; then
    rm -rf "$dir"
    "$PYTHON" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet "$@"
  fi
}

venv "$PEERS/triton-venv" "import pytriton, onnxruntime, numpy" \
  "nvidia-pytriton==0.7.0" onnxruntime numpy
venv "$PEERS/pa-venv" \
  "import importlib.metadata as m; assert m.version('tritonclient') == '2.51.0'; import nvidia.cuda_runtime" \
  "tritonclient==2.51.0" nvidia-cuda-runtime-cu12

if ! ldconfig -p | grep -q 'libb64\.so\.0d' && [ ! -e "$PEERS/lib/libb64.so.0d" ]; then
  debs=$(mktemp -d)
  (cd "$debs" && { apt-get download libb64-0d || { apt-get update -qq && apt-get download libb64-0d; }; })
  dpkg-deb -x "$debs"/libb64-0d_*.deb "$debs/root"
  cp "$debs"/root/usr/lib/x86_64-linux-gnu/libb64.so.0d "$PEERS/lib/"
  rm -rf "$debs"
fi

PYTRITON=$("$PEERS/triton-venv/bin/python" -c 'import os, pytriton; print(os.path.dirname(pytriton.__file__))')
SERVER=$PYTRITON/tritonserver
# the libraries auditwheel moved out of the binaries' way, and the libpython the 3.11 stub links
# (without it the stub loads Debian's libpython 3.11.2 beside the venv's 3.11.7 standard library)
WHEEL_LIBS=$(cd "$PYTRITON/../nvidia_pytriton.libs" && pwd)
PYTHON_LIB=$("$PEERS/triton-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
CUDART=$("$PEERS/pa-venv/bin/python" -c 'import nvidia.cuda_runtime as c; print(list(c.__path__)[0])')/lib

# copied once: a running server's backend library must never be overwritten under it
BACKEND=$PEERS/backends/python
if [ ! -x "$BACKEND/triton_python_backend_stub" ]; then
  mkdir -p "$BACKEND"
  cp "$SERVER/backends/python/libtriton_python.so" \
    "$SERVER/backends/python/triton_python_backend_utils.py" \
    "$SERVER/python_backend_stubs/3.11/triton_python_backend_stub" "$BACKEND/"
fi

# The stub starts the first python on PATH: the venv's, which has onnxruntime.
cat > "$PEERS/bin/tritonserver" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$PYTHON_LIB:$WHEEL_LIBS:$PEERS/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="$PEERS/triton-venv/bin:\$PATH"
exec "$SERVER/bin/tritonserver" --backend-directory "$PEERS/backends" \\
  --cache-directory "$SERVER/caches" "\$@"
WRAPPER
cat > "$PEERS/bin/perf_analyzer" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$PEERS/lib:$CUDART\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$PEERS/pa-venv/bin/perf_analyzer" "\$@"
WRAPPER
chmod +x "$PEERS/bin/tritonserver" "$PEERS/bin/perf_analyzer"

missing=$(LD_LIBRARY_PATH="$PYTHON_LIB:$WHEEL_LIBS:$PEERS/lib" ldd "$SERVER/bin/tritonserver" \
  "$BACKEND/triton_python_backend_stub" | grep 'not found' || true)
[ -z "$missing" ] || { echo "tritonserver cannot start, libraries missing:$missing" >&2; exit 1; }
"$PEERS/bin/perf_analyzer" --version
echo "installed under $PEERS: bin/tritonserver (Triton 2.51, Python backend), bin/perf_analyzer"
