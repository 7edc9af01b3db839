#!/usr/bin/env bash
# Compile proto/*.proto into the descriptor sets the package loads at import time.
#
#   scripts/gen_proto.sh [OUT_DIR [CONFIG_OUT_DIR]]
#
# Writes OUT_DIR/inference.desc (default: src/inferplex/protocol/v2/generated), the V2
# protos and gRPC's health and reflection services, for the gRPC frontend; and
# CONFIG_OUT_DIR/model_config.desc (default: src/inferplex/config), model_config.proto
# alone, the schema config/pbtxt.py reads config.pbtxt against. The message classes are
# built from them in private descriptor pools (see generated/__init__.py), so no *_pb2.py
# modules are generated: those would register `inference.*` in protobuf's default pool and
# clash with tritonclient's own copy in the same process.
# PYTHON selects the interpreter that has grpcio-tools (default: the project's .venv).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out_dir="${1:-$root/src/inferplex/protocol/v2/generated}"
config_out_dir="${2:-$root/src/inferplex/config}"
python="${PYTHON:-$root/.venv/bin/python}"
[[ -x "$python" ]] || python="python3"

mkdir -p "$out_dir" "$config_out_dir"
# Without source info the sets are small and do not change when only comments do.
"$python" -m grpc_tools.protoc \
  --proto_path="$root/proto" \
  --include_imports \
  --descriptor_set_out="$out_dir/inference.desc" \
  "$root/proto/grpc_service.proto" "$root/proto/model_config.proto" \
  "$root/proto/grpc/health/v1/health.proto" \
  "$root/proto/grpc/reflection/v1/reflection.proto" \
  "$root/proto/grpc/reflection/v1alpha/reflection.proto"
echo "wrote $out_dir/inference.desc"
"$python" -m grpc_tools.protoc \
  --proto_path="$root/proto" \
  --descriptor_set_out="$config_out_dir/model_config.desc" \
  "$root/proto/model_config.proto"
echo "wrote $config_out_dir/model_config.desc"
