#!/usr/bin/env bash
# Run HERE, before a call of the device tool: downloads into .whl/ (git-ignored) the Python 3.12
# wheels of what inferplex and its GPU tests need that the device image lacks; the image's own
# packages (torch with CUDA, numpy, grpcio, protobuf, pytest, ...: the list in
# ../.library/device/KINDS.md) are used as they are. Then, in the device tool:
#   run(command="bash scripts/device_check.sh", carry=[".whl"], timeout_s=540)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  -d .whl httptools orjson "pydantic>=2.6" "pydantic-settings>=2.2" hpack cryptography \
  pytest-asyncio h2 "tritonclient[http,grpc]"
# what the image has already: two versions of one package stop the install there
for name in aiohappyeyeballs aiohttp aiosignal attrs certifi frozenlist grpcio idna iniconfig \
  ml_dtypes multidict numpy packaging pluggy propcache protobuf pygments pytest \
  typing_extensions urllib3 yarl; do
  rm -f .whl/"$name"-[0-9]*.whl
done
du -sh .whl
