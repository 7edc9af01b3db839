"""One schema: the compiled model_config.proto is what config.pbtxt is read against, what
readers.py lists as "not supported yet", and what a served config parses into, field for
field; every field of it round-trips through protobuf's own text format."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, json_format, message_factory, text_format

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.config.pbtxt import is_repeated, model_config_schema, parse_pbtxt
from inferplex.config.readers import complete_config, config_from_dict
from inferplex.config.served import check_served
from inferplex.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = ROOT / "src/inferplex/config/model_config.desc"
GRPC_SET = ROOT / "src/inferplex/protocol/v2/generated/inference.desc"


def _descriptor_set(path: Path) -> descriptor_pb2.FileDescriptorSet:
    return descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes())


def _message(descriptor: Any = None) -> Any:
    return message_factory.GetMessageClass(descriptor or model_config_schema())()


# --------------------------------------------------------------------------- one source


def test_committed_schema_matches_the_proto(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    subprocess.run(
        ["bash", str(tmp_path / "scripts/gen_proto.sh"), str(tmp_path / "g"), str(tmp_path / "c")],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    fresh = _descriptor_set(tmp_path / "c/model_config.desc")
    assert fresh == _descriptor_set(COMMITTED), "run scripts/gen_proto.sh and commit the result"


def test_the_config_schema_is_the_one_the_grpc_frontend_serves() -> None:
    (ours,) = _descriptor_set(COMMITTED).file
    served = {f.name: f for f in _descriptor_set(GRPC_SET).file}["model_config.proto"]
    assert ours == served


def test_every_model_config_field_is_in_the_schema() -> None:
    """What ModelConfig holds has a place in the compiled message: served configs parse into
    it strictly, and readers.py can tell supported fields from not-yet-supported ones."""
    schema = model_config_schema()
    assert set(ModelConfig.model_fields) - {"unsupported_fields", "as_written"} <= set(
        schema.fields_by_name
    )
    tensor_fields = set(TensorConfig.model_fields)
    inputs = set(schema.fields_by_name["input"].message_type.fields_by_name)
    outputs = set(schema.fields_by_name["output"].message_type.fields_by_name)
    assert tensor_fields <= inputs | outputs


def test_not_yet_supported_means_in_the_schema_but_not_in_model_config() -> None:
    """readers.py keeps no list of Triton's fields: a field of the compiled ModelConfig that
    the pydantic ModelConfig lacks is "not supported yet", any other name "unknown"."""
    supported = set(ModelConfig.model_fields)
    message = json_format.ParseDict(_filled(model_config_schema(), 1), _message())
    for name in supported & set(message.DESCRIPTOR.fields_by_name):
        message.ClearField(name)
    text = text_format.MessageToString(message) + "\nmax_batchsize: 2"
    config = config_from_dict(parse_pbtxt(text), "m", "m/config.pbtxt")
    not_yet = set(model_config_schema().fields_by_name) - supported
    assert set(config.unsupported_fields) == {
        *(f"{name} (not supported yet)" for name in not_yet),
        "max_batchsize (unknown field)",
    }
    assert "batch_input (not supported yet)" in config.unsupported_fields
    config = config_from_dict(
        parse_pbtxt("ensemble_scheduling { step { model_name: 'a' model_namespace: 'n' } }"),
        "m",
        "m/config.pbtxt",
    )
    assert config.unsupported_fields == (
        "ensemble_scheduling.step[0].model_namespace (not supported yet)",
    )


# --------------------------------------------------------------------------- every field


def _sample(field: Any, variant: int, depth: int) -> Any:
    """A value for ``field`` that protobuf's text format writes out (not a zero value)."""
    if field.message_type is not None:
        return _filled(field.message_type, variant, depth + 1)
    if field.enum_type is not None:
        values = field.enum_type.values
        return values[-1 - variant % len(values)].name if len(values) > 1 else values[0].name
    kind = field.type
    if kind == field.TYPE_BOOL:
        return True
    if kind == field.TYPE_STRING:
        return ['it\'s "quoted"', "é\n", "plain"][variant % 3]
    if kind in (field.TYPE_FLOAT, field.TYPE_DOUBLE):
        return [0.5, 2.25, -8.0][variant % 3]
    if kind in (field.TYPE_UINT32, field.TYPE_UINT64, field.TYPE_FIXED32, field.TYPE_FIXED64):
        return 7 + variant
    return -3 - variant  # signed integers


def _filled(descriptor: Any, variant: int, depth: int = 0) -> dict[str, Any]:
    """Every field of ``descriptor`` set (JSON form); of a oneof, member ``variant``."""
    if descriptor.GetOptions().map_entry:
        key = descriptor.fields_by_name["key"]
        return {"key": str(variant) if key.type == key.TYPE_STRING else variant + 1}
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and oneof.fields[variant % len(oneof.fields)] is not field:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            key_field = field.message_type.fields_by_name["key"]
            keys = ["b", "a"] if key_field.type == key_field.TYPE_STRING else [2, 1]
            out[field.name] = {str(k): _sample(value_field, variant, depth) for k in keys}
        elif is_repeated(field):
            out[field.name] = [_sample(field, variant, depth), _sample(field, variant + 1, depth)]
        else:
            out[field.name] = _sample(field, variant, depth)
    return out


def _as_read(message: Any) -> dict[str, Any]:
    """What parse_pbtxt gives for the text protobuf writes for ``message``: maps as sorted
    ``key``/``value`` entries, enums by name, everything set (proto3 drops zero values)."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = [
                {"key": key, "value": _read_value(value_field, value[key])} for key in sorted(value)
            ]
        elif is_repeated(field):
            out[field.name] = [_read_value(field, item) for item in value]
        else:
            out[field.name] = _read_value(field, value)
    return out


def _read_value(field: Any, value: Any) -> Any:
    if field.message_type is not None:
        return _as_read(value)
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    return value


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.parametrize("one_line", [False, True])
def test_every_field_of_the_schema_reads_back_from_protobufs_own_text(
    variant: int, one_line: bool
) -> None:
    """A ModelConfig message with every field of every message set (each member of each
    oneof in one of the variants), written by protobuf's text_format, reads back field for
    field: names, nesting, lists, maps, enums, strings with escapes, numbers."""
    message = json_format.ParseDict(_filled(model_config_schema(), variant), _message())
    text = text_format.MessageToString(message, as_one_line=one_line)
    assert parse_pbtxt(text) == _as_read(message)
    assert len(text) > 2000


# --------------------------------------------------------------------------- served configs

SERVED = [
    """
    name: "classify"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "image" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [ 224, 224, 3 ] } ]
    output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1000 ]
               label_filename: "labels.txt" } ]
    instance_group [ { name: "g" count: 2 kind: KIND_CPU
                       rate_limiter { resources [ { name: "R1" global: true count: 2 } ]
                                      priority: 2 } } ]
    version_policy { specific { versions: [ 1, 3 ] } }
    dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100
                       priority_levels: 2 default_priority_level: 1
                       default_queue_policy { timeout_action: DELAY max_queue_size: 10 }
                       priority_queue_policy { key: 2 value { max_queue_size: 3 } } }
    parameters { key: "intra_op_thread_count" value { string_value: "2" } }
    model_warmup [ { name: "w" batch_size: 2 count: 3
                     inputs { key: "image" value { data_type: TYPE_UINT8 dims: [ 224, 224, 3 ]
                                                  random_data: true } } } ]
    optimization { execution_accelerators { cpu_execution_accelerator [
                   { name: "openvino" parameters { key: "k" value: "v" } } ] } }
    scheduling { weight: 2 slo_p99_ms: 20 adaptive_batching: true nice: 3 }
    response_cache { enable: true }
    default_model_filename: "model.onnx"
    """,
    """
    name: "pipe"
    platform: "ensemble"
    input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] optional: true } ]
    output [ { name: "y" data_type: TYPE_STRING dims: [ 1 ] reshape { shape: [ ] } } ]
    ensemble_scheduling { step [
      { model_name: "a" model_version: -1 input_map { key: "in" value: "x" }
        output_map { key: "out" value: "t" } },
      { model_name: "b" model_version: 2 input_map { key: "in" value: "t" }
        output_map { key: "out" value: "y" } } ] }
    """,
    """
    name: "routed"
    backend: "size_routing"
    max_batch_size: 4
    input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
    output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
    size_routing { input_name: "x" rule [ { model_name: "small" max_dims: [ 64 ] },
                                          { model_name: "big" } ] }
    version_policy { all { } }
    """,
    """
    name: "cascaded"
    backend: "cascade"
    max_batch_size: 4
    input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "p" data_type: TYPE_FP32 dims: [ 3 ] } ]
    cascade { light_model: "s" heavy_model: "b" heavy_model_version: 2
              confidence_output: "p" confidence: max threshold: 0.75 }
    """,
]


@pytest.mark.parametrize("text", SERVED, ids=["classify", "ensemble", "size_routing", "cascade"])
def test_a_served_config_is_the_compiled_message_and_reads_back_the_same(text: str) -> None:
    """GET /v2/models/{m}/config (to_triton_dict) parses strictly into the compiled
    ModelConfig: no key it renders is unknown to the schema. Written back as a config.pbtxt by
    protobuf, it reads as the same served config: every field round-trips."""
    name = parse_pbtxt(text)["name"]
    config = config_from_dict(parse_pbtxt(text), name, f"{name}/config.pbtxt")
    assert config.unsupported_fields == ()
    served = config.to_triton_dict()
    message = json_format.ParseDict(served, _message())
    again = config_from_dict(
        parse_pbtxt(text_format.MessageToString(message)), name, f"{name}/config.pbtxt"
    )
    assert again.to_triton_dict() == served


def test_format_and_label_filename_are_kept_and_served() -> None:
    config = config_from_dict(parse_pbtxt(SERVED[0]), "classify", "classify/config.pbtxt")
    assert config.input[0].format == "FORMAT_NHWC"
    assert config.output[0].label_filename == "labels.txt"
    served = config.to_triton_dict()
    assert served["input"][0]["format"] == "FORMAT_NHWC"
    assert served["output"][0]["label_filename"] == "labels.txt"
    yaml_like = {
        "input": [{"name": "i", "data_type": "FP32", "dims": [1], "format": "FORMAT_NCHW"}],
        "output": [{"name": "o", "data_type": "FP32", "dims": [1], "label_filename": "l.txt"}],
    }
    config = config_from_dict(yaml_like, "m", "m/config.yaml")
    assert config.to_triton_dict()["input"][0]["format"] == "FORMAT_NCHW"
    assert config.to_triton_dict()["output"][0]["label_filename"] == "l.txt"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'input [ { name: "a" data_type: TYPE_FP32 format: FORMAT_NWHC } ]',
            "m/config.pbtxt: input[0].format: expected 'FORMAT_NONE', 'FORMAT_NHWC' or "
            "'FORMAT_NCHW', got 'FORMAT_NWHC'",
        ),
        (
            'output [ { name: "a" data_type: TYPE_FP32 label_filename: "/etc/passwd" } ]',
            "m/config.pbtxt: output[0].label_filename: '/etc/passwd' ",
        ),
    ],
)
def test_format_and_label_filename_are_checked(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict(parse_pbtxt(text), "m", "m/config.pbtxt")
    assert info.value.message.startswith(message)


def test_format_is_an_input_field_and_label_filename_an_output_field() -> None:
    text = """
    input [ { name: "a" data_type: TYPE_FP32 label_filename: "l.txt" } ]
    output [ { name: "b" data_type: TYPE_FP32 format: FORMAT_NCHW } ]
    """
    config = config_from_dict(parse_pbtxt(text), "m", "m/config.pbtxt")
    assert config.unsupported_fields == (
        "input[0].label_filename (unknown field)",
        "output[0].format (unknown field)",
    )
    assert (config.input[0].label_filename, config.output[0].format) == ("", "FORMAT_NONE")


# --------------------------------------------------------------------------- fields kept


@pytest.mark.parametrize("variant", [0, 1, 2])
def test_every_field_this_server_does_not_read_is_served_as_written(variant: int) -> None:
    """Triton serves back every field of a config (clients read them: perf_analyzer's
    sequence_batching, image_client's format): so does the served config, for each field of
    the schema that ModelConfig does not read, with every field inside it set."""
    message = json_format.ParseDict(_filled(model_config_schema(), variant), _message())
    for name in set(ModelConfig.model_fields) & set(message.DESCRIPTOR.fields_by_name):
        message.ClearField(name)
    config = config_from_dict(parse_pbtxt(text_format.MessageToString(message)), "m", "m.pbtxt")
    served = json_format.ParseDict(config.to_triton_dict(), _message())
    kept = [field.name for field, _ in message.ListFields()]
    assert len(kept) >= 8
    for name in kept:
        assert getattr(served, name) == getattr(message, name), name


NESTED = """
name: "nested"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] allow_ragged_batch: true
          is_non_linear_format_io: true } ]
output [ { name: "b" data_type: TYPE_FP32 dims: [ 4 ] is_non_linear_format_io: true } ]
instance_group [ { count: 1 kind: KIND_CPU passive: true host_policy: "numa0" profile: [ "p" ]
                   secondary_devices [ { kind: KIND_NVDLA device_id: 1 } ] } ]
optimization { graph { level: 1 } priority: PRIORITY_MAX cuda { graphs: true }
               input_pinned_memory { enable: false } eager_batching: true
               execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }
sequence_batching { max_sequence_idle_microseconds: 5000000 oldest { max_candidate_sequences: 4 }
  control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                              int32_false_true: [ 0, 1 ] } ] } ] }
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: [ "s" ] data_type: TYPE_INT32
                source_input: [ "a" ] } ]
model_repository_agents { agents [ { name: "checksum"
                                     parameters { key: "MD5:model.onnx" value: "abc" } } ] }
model_metrics { metric_control [ { metric_identifier { family: "nv_inference_request_duration" }
                                   histogram_options { buckets: [ 0.5, 1 ] } } ] }
"""


def test_fields_inside_read_sections_are_served_as_written_beside_the_read_ones() -> None:
    """Fields this server does not read, inside sections it does (an input's
    allow_ragged_batch, an instance group's host_policy, optimization's priority), come back
    in place, beside the read fields; the served config equals the file's message."""
    config = config_from_dict(parse_pbtxt(NESTED), "nested", "nested/config.pbtxt")
    served = json_format.ParseDict(config.to_triton_dict(), _message())
    written = text_format.Parse(NESTED, _message())
    served.instance_group[0].ClearField("name")  # named by the server, as Triton does
    for shown in ("version_policy", "model_transaction_policy"):  # defaults, shown
        served.ClearField(shown)
    assert served == written
    assert config.to_triton_dict()["input"][0]["allow_ragged_batch"] is True
    assert config.to_triton_dict()["optimization"]["priority"] == "PRIORITY_MAX"


def test_what_model_config_says_wins_over_the_file() -> None:
    """The served config is ModelConfig's where it says something: completed inputs, a
    filled max_batch_size; the file's other fields stay on their items."""
    text = """
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] allow_ragged_batch: true } ]
    instance_group [ { count: 2 host_policy: "h" } ]
    """

    def tensor(name: str) -> TensorConfig:
        return TensorConfig(name=name, data_type="FP32", dims=(-1, 16))

    config = complete_config(
        config_from_dict(parse_pbtxt(text), "m", "m/config.pbtxt"),
        "m",
        [tensor("INPUT0"), tensor("INPUT1")],
        [tensor("OUTPUT0")],
    )
    served = config.to_triton_dict()
    assert served["max_batch_size"] == 4
    assert [(i["name"], i["allow_ragged_batch"]) for i in served["input"]] == [
        ("INPUT0", True),
        ("INPUT1", False),
    ]
    assert served["output"][0]["name"] == "OUTPUT0"
    assert served["instance_group"][0]["host_policy"] == "h"
    assert served["instance_group"][0]["count"] == 2


def test_yaml_shorthands_are_served_in_protobufs_form() -> None:
    raw = {
        "max_batch_size": 2,
        "input": [{"name": "a", "data_type": "FP32", "dims": 4, "allow_ragged_batch": True}],
        "output": [{"name": "b", "data_type": "FP32", "dims": [4]}],
        "parameters": {"k": 2, "flag": True},
        "batch_input": {"kind": 4, "target_name": "s", "data_type": "INT32"},
        "sequence_batching": None,
        "model_operations": {"op_library_filename": "ops.so"},
    }
    served = config_from_dict(raw, "m", "m/config.yaml").to_triton_dict()
    assert served["parameters"] == {"k": {"string_value": "2"}, "flag": {"string_value": "true"}}
    assert served["batch_input"] == [
        {"kind": "BATCH_ITEM_SHAPE", "target_name": ["s"], "data_type": "TYPE_INT32"}
    ]
    assert served["sequence_batching"] == {}
    assert served["model_operations"] == {"op_library_filename": ["ops.so"]}
    assert served["input"][0]["allow_ragged_batch"] is True
    json_format.ParseDict(served, _message())


@pytest.mark.parametrize(
    "text",
    [
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] allow_ragged_batch: "yes" } ]',
        "sequence_batching { max_sequence_idle_microseconds: -5 }",
        'model_operations { op_library_filename: 3 } model_metrics: "x"',
    ],
)
def test_a_field_kept_as_written_must_hold_its_protobuf_type(text: str) -> None:
    """A field that is only served back is still checked, once, at load: its value must be
    one of its protobuf type (Triton refuses such a config too), so the gRPC ModelConfig
    answer can always be built."""
    with pytest.raises(ConfigError, match=r"^m/config\.pbtxt: "):
        config_from_dict(parse_pbtxt(text), "m", "m/config.pbtxt")


def test_a_served_config_is_the_callers_to_change() -> None:
    """The fields kept as written are shared by every version of the model: a caller that
    changes the served dict changes its own copy."""
    config = config_from_dict(parse_pbtxt(NESTED), "nested", "nested/config.pbtxt")
    served = config.to_triton_dict()
    served["sequence_batching"]["oldest"]["max_candidate_sequences"] = 99
    served["model_metrics"]["metric_control"].clear()
    again = config.to_triton_dict()
    assert again["sequence_batching"]["oldest"]["max_candidate_sequences"] == 4
    assert again["model_metrics"]["metric_control"]


def test_a_config_found_valid_is_remembered_but_for_its_names_and_types() -> None:
    """check_served skips the parse for a config that differs from one found valid only by
    its model's and groups' names; a value of another type, or one that fails, is parsed
    again every time and gets the parse's own error."""
    served = {
        "name": "m0001",
        "max_batch_size": 8,
        "input": [{"name": "i", "data_type": "TYPE_FP32", "dims": [16]}],
        "instance_group": [{"name": "m0001_0", "kind": "KIND_CPU", "count": 1}],
    }
    check_served(served, "m0001/config.pbtxt")
    renamed = {
        **served,
        "name": "m0002",
        "instance_group": [{"name": "m0002_0", "kind": "KIND_CPU", "count": 1}],
    }
    check_served(renamed, "m0002/config.pbtxt")
    for bad, problem in (
        ({**renamed, "max_batch_size": "8x"}, "max_batch_size"),
        ({**renamed, "input": [{"name": "i", "data_type": "TYPE_FP32", "dims": [16.5]}]}, "dims"),
    ):
        for _ in range(2):
            with pytest.raises(ConfigError) as info:
                check_served(bad, "m0002/config.pbtxt")
            assert info.value.message.startswith("m0002/config.pbtxt: ")
            assert problem in info.value.message
