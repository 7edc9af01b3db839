#!/usr/bin/env bash
# Compile proto/*.proto into the descriptor set the gRPC frontend loads at import time.
#
#   scripts/gen_proto.sh [OUT_DIR]
#
# Writes OUT_DIR/inference.desc (default: src/inferplex/protocol/v2/generated). The message
# classes are built from it in a private descriptor pool (see generated/__init__.py), so no
# *_pb2.py modules are generated: those would register `inference.*` in protobuf's default
# pool and clash with tritonclient's own copy in the same process.
# PYTHON selects the interpreter that has grpcio-tools (default: the project's .venv).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-$root/src/inferplex/protocol/v2/generated}"
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="python3"

mkdir -p "$out_dir"
# Without source info the set is small and does not change when only comments do.
"$python" -m grpc_tools.protoc \
  --proto_path="$root/proto" \
  --include_imports \
  --descriptor_set_out="$out_dir/inference.desc" \
  "$root/proto/grpc_service.proto" "$root/proto/model_config.proto"
echo "wrote $out_dir/inference.desc"
