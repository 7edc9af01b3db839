"""A Triton config.pbtxt with many of model_config.proto's fields, those this server honours
and those it only keeps, comes back field for field from GET /v2/models/{m}/config and the gRPC
ModelConfig, read by tritonclient (issue 20 §4: Triton's image_client read FORMAT_NONE)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format, message_factory, text_format

from examples import modelgen
from inferplex.config.pbtxt import model_config_schema
from inferplex_tools.benchtool.launch import RunningServer, start_server

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

MODEL = "triton_fields"

#: add_sub's model under a config using fields of most of model_config.proto's messages
CONFIG = """
name: "triton_fields"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
version_policy { latest { num_versions: 1 } }
input [
  { name: "INPUT0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 16 ]
    allow_ragged_batch: true },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] reshape { shape: [ 16 ] } }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] label_filename: "labels.txt" },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: [ "COUNT" ] data_type: TYPE_INT32
                source_input: [ "INPUT0" ] } ]
batch_output [ { target_name: [ "OUTPUT1" ] kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: [ "INPUT1" ] } ]
optimization {
  graph { level: 1 }
  priority: PRIORITY_MAX
  input_pinned_memory { enable: true }
  output_pinned_memory { enable: true }
  gather_kernel_buffer_threshold: 4
  eager_batching: true
}
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  preserve_ordering: true
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000000
                         allow_timeout_override: true max_queue_size: 64 }
}
instance_group [ { name: "cpu" count: 1 kind: KIND_CPU host_policy: "numa0"
                   profile: [ "p1" ] } ]
default_model_filename: "model.onnx"
cc_model_filenames { key: "8.6" value: "model.onnx" }
metric_tags { key: "team" value: "vision" }
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
model_warmup [ { name: "zeros" batch_size: 1 count: 1
  inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value { data_type: TYPE_FP32 dims: [ 16 ] random_data: true } } } ]
model_operations { op_library_filename: [ "libcustom_ops.so" ] }
model_transaction_policy { decoupled: false }
model_repository_agents { agents [ { name: "checksum"
                                     parameters { key: "MD5:1/model.onnx" value: "0123" } } ] }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_request_duration" }
                                   histogram_options { buckets: [ 0.1, 1, 10 ] } } ] }
"""


def _message(**fields: Any) -> Any:
    """A message of the full schema (Triton's model_config.proto and ours): tritonclient's own
    copy is older and lacks some of Triton's fields (model_metrics)."""
    return message_factory.GetMessageClass(model_config_schema())(**fields)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repository")
    modelgen.add_sub(repo, name=MODEL)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    (repo / MODEL / "labels.txt").write_text("\n".join(f"class{i}" for i in range(16)))
    running = start_server(repo, tmp_path_factory.mktemp("log") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def test_the_config_comes_back_field_for_field_over_http(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        served = client.get_model_config(MODEL)
    finally:
        client.close()
    assert served["input"][0]["format"] == "FORMAT_NCHW"  # what image_client reads
    assert served["output"][0]["label_filename"] == "labels.txt"
    # strictly: every key the server renders is a field of the schema
    assert json_format.ParseDict(served, _message()) == text_format.Parse(CONFIG, _message())


def test_the_config_comes_back_field_for_field_over_grpc(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        served = client.get_model_config(MODEL).config
    finally:
        client.close()
    assert served.input[0].format == served.input[0].FORMAT_NCHW
    assert served.input[0].allow_ragged_batch
    assert served.optimization.priority == served.optimization.PRIORITY_MAX
    # tritonclient keeps the fields its copy of the schema lacks as unknown ones: read back
    # in the full schema, the answer is the file's message
    again = _message()
    again.ParseFromString(served.SerializeToString())
    assert again == text_format.Parse(CONFIG, _message())
