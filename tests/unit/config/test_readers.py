"""Reading config.pbtxt / config.yaml into ModelConfig, and completing a config from the
model file's own signature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
)
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import (
    DEFAULT_MAX_BATCH_SIZE,
    complete_config,
    config_from_dict,
    read_model_config,
)
from inferplex.errors import ConfigError

PBTXT = """
name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1000 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { latest: { num_versions: 2 } }
dynamic_batching {
  max_queue_delay_microseconds: 500
  priority_levels: 2
  priority_queue_policy { key: 1 value: { max_queue_size: 64 } }
}
parameters { key: "intra_op_thread_count" value: { string_value: "2" } }
"""

YAML = """
name: resnet
platform: onnxruntime_onnx
max_batch_size: 8
input: [{name: input, data_type: FP32, dims: [3, 224, 224]}]
output: [{name: probs, data_type: TYPE_FP32, dims: [1000]}]
instance_group: [{count: 2, kind: KIND_CPU}]
version_policy: {latest: {num_versions: 2}}
dynamic_batching:
  max_queue_delay_microseconds: 500
  priority_levels: 2
  priority_queue_policy: {1: {max_queue_size: 64}}
parameters: {intra_op_thread_count: "2"}
"""

EXPECTED = ModelConfig(
    name="resnet",
    platform="onnxruntime_onnx",
    max_batch_size=8,
    input=(TensorConfig(name="input", data_type="FP32", dims=(3, 224, 224)),),
    output=(TensorConfig(name="probs", data_type="FP32", dims=(1000,)),),
    instance_group=(InstanceGroup(count=2, kind="KIND_CPU"),),
    version_policy=VersionPolicy(policy="latest", num_versions=2),
    dynamic_batching=DynamicBatching(
        max_queue_delay_microseconds=500,
        priority_levels=2,
        priority_queue_policy={1: QueuePolicy(max_queue_size=64)},
    ),
    parameters={"intra_op_thread_count": "2"},
)


def _model_dir(tmp_path: Path, files: dict[str, str | bytes], name: str = "resnet") -> Path:
    model_dir = tmp_path / name
    model_dir.mkdir()
    for filename, content in files.items():
        path = model_dir / filename
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return model_dir


def _pbtxt(text: str, name: str = "m") -> ModelConfig:
    return config_from_dict(parse_pbtxt(text), name, f"{name}/config.pbtxt")


def _yaml(text: str, name: str = "m") -> ModelConfig:
    return config_from_dict(yaml.safe_load(text) or {}, name, f"{name}/config.yaml")


def _error(text: str, fmt: str = "pbtxt") -> str:
    with pytest.raises(ConfigError) as info:
        _pbtxt(text) if fmt == "pbtxt" else _yaml(text)
    return str(info.value)


def _honoured(config: ModelConfig) -> ModelConfig:
    """The config without the fields kept as written (only served back)."""
    return config.model_copy(update={"as_written": {}})


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("filename", "text"), [("config.pbtxt", PBTXT), ("config.yaml", YAML), ("config.yml", YAML)]
)
def test_both_formats_read_into_the_same_config(tmp_path: Path, filename: str, text: str) -> None:
    config = read_model_config(_model_dir(tmp_path, {filename: text}))
    assert config is not None and _honoured(config) == EXPECTED
    assert config.unsupported_fields == ()
    # the fields as written, served back beneath the honoured ones, are the same too
    assert config.as_written == _pbtxt(PBTXT, "resnet").as_written


def test_an_unchanged_file_is_parsed_once_and_a_changed_one_again(tmp_path: Path) -> None:
    model_dir = _model_dir(tmp_path, {"config.pbtxt": PBTXT})
    first = read_model_config(model_dir)
    assert read_model_config(model_dir) is first  # reloads of a new version share it
    (model_dir / "config.pbtxt").write_text(PBTXT.replace("max_batch_size: 8", "max_batch_size: 4"))
    changed = read_model_config(model_dir)
    assert changed is not None and changed.max_batch_size == 4
    (model_dir / "config.pbtxt").write_text(
        PBTXT.replace("max_batch_size: 8", "max_batch_size: -2")
    )
    for _ in range(2):  # errors are raised every time
        with pytest.raises(ConfigError, match="max_batch_size"):
            read_model_config(model_dir)


def test_no_config_file_is_none(tmp_path: Path) -> None:
    assert read_model_config(_model_dir(tmp_path, {"model.onnx": "x"})) is None


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"config.pbtxt": PBTXT, "config.yaml": YAML},
            "model 'resnet' has both config.pbtxt and config.yaml; keep one of them",
        ),
        (
            {"config.yaml": YAML, "config.yml": YAML},
            "model 'resnet' has both config.yaml and config.yml; keep one of them",
        ),
    ],
)
def test_two_config_files_are_an_error(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_model_config(_model_dir(tmp_path, files))
    assert str(info.value) == message


@pytest.mark.parametrize("filename", ["config.pbtxt", "config.yaml"])
def test_an_empty_file_names_the_model_after_its_folder(tmp_path: Path, filename: str) -> None:
    config = read_model_config(_model_dir(tmp_path, {filename: ""}, name="adder"))
    assert config == ModelConfig(name="adder")
    assert config.model_fields_set == {"name", "unsupported_fields", "as_written"}


@pytest.mark.parametrize(
    ("filename", "text"),
    [("config.pbtxt", 'name: "other"'), ("config.yaml", "name: other")],
)
def test_a_name_other_than_the_folder_is_an_error(tmp_path: Path, filename: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_model_config(_model_dir(tmp_path, {filename: text}, name="adder"))
    assert str(info.value) == (
        f"adder/{filename}: name: the config names the model 'other' but its folder is "
        "'adder'; they must be the same (or leave name out)"
    )


def test_parse_errors_name_the_model_folder_and_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        read_model_config(_model_dir(tmp_path, {"config.pbtxt": "max_batch_size: 8\ndims 3"}))
    assert str(info.value) == "resnet/config.pbtxt:2:6: expected ':' or '{' after 'dims'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: [unclosed",
            "resnet/config.yaml:1:16: invalid YAML: expected ',' or ']', but got '<stream end>'",
        ),
        ("a: b: c", "resnet/config.yaml:1:5: invalid YAML: mapping values are not allowed here"),
        ("- a\n- b", "resnet/config.yaml: expected a mapping of config fields, got list"),
        ("just text", "resnet/config.yaml: expected a mapping of config fields, got str"),
    ],
)
def test_yaml_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        read_model_config(_model_dir(tmp_path, {"config.yaml": text}))
    assert str(info.value).startswith(message)


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^resnet/config\.pbtxt: cannot be read: "):
        read_model_config(_model_dir(tmp_path, {"config.pbtxt": b'name: "\xff"'}))


# --------------------------------------------------------------------------- fields


@pytest.mark.parametrize(
    ("written", "datatype"),
    [
        ("TYPE_FP32", "FP32"),
        ("TYPE_STRING", "BYTES"),
        ("TYPE_BOOL", "BOOL"),
        ("TYPE_UINT64", "UINT64"),
        ("FP16", "FP16"),
        ("BYTES", "BYTES"),
        ("int8", "INT8"),
    ],
)
def test_data_types(written: str, datatype: str) -> None:
    config = _yaml(f"input: [{{name: a, data_type: {written}, dims: [1]}}]")
    assert config.input[0].data_type == datatype


def test_tensor_fields() -> None:
    config = _pbtxt(
        """
        input [
          { name: "a" data_type: TYPE_FP32 dims: [ -1, 4 ] optional: true },
          { name: "s" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true },
          { name: "in" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }
        ]
        output { name: "o" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape { shape: [ 4 ] } }
        """
    )
    assert config.input == (
        TensorConfig(name="a", data_type="FP32", dims=(-1, 4), optional=True),
        TensorConfig(name="s", data_type="INT32", dims=(2,), is_shape_tensor=True),
        TensorConfig(name="in", data_type="FP32", dims=(1,), reshape=()),
    )
    assert config.output == (TensorConfig(name="o", data_type="FP32", dims=(2, 2), reshape=(4,)),)


def test_yaml_single_values_for_repeated_fields() -> None:
    config = _yaml(
        """
        input: {name: a, data_type: FP32, dims: 16}
        instance_group: {kind: KIND_GPU, gpus: 0}
        dynamic_batching: {preferred_batch_size: 4}
        version_policy: {specific: {versions: 3}}
        """
    )
    assert config.input[0].dims == (16,)
    assert config.instance_group == (InstanceGroup(kind="KIND_GPU", gpus=(0,)),)
    assert config.dynamic_batching == DynamicBatching(preferred_batch_size=(4,))
    assert config.version_policy == VersionPolicy(policy="specific", versions=(3,))


@pytest.mark.parametrize(
    ("pbtxt", "yaml_text", "policy"),
    [
        ("", "", VersionPolicy()),
        ("version_policy {}", "version_policy: {}", VersionPolicy()),
        ("version_policy: { all: {}}", "version_policy: {all: {}}", VersionPolicy(policy="all")),
        ("version_policy { all { } }", "version_policy: {all: }", VersionPolicy(policy="all")),
        (
            "version_policy: { latest: { num_versions: 2}}",
            "version_policy: {latest: {num_versions: 2}}",
            VersionPolicy(policy="latest", num_versions=2),
        ),
        (
            "version_policy { latest { } }",
            "version_policy:\n  latest:",
            VersionPolicy(policy="latest", num_versions=1),
        ),
        (
            "version_policy: { specific: { versions: [1,3]}}",
            "version_policy: {specific: {versions: [1, 3]}}",
            VersionPolicy(policy="specific", versions=(1, 3)),
        ),
        (
            "version_policy { specific { versions: 1 versions: 3 } }",
            "version_policy:\n  specific:\n    versions:\n      - 1\n      - 3",
            VersionPolicy(policy="specific", versions=(1, 3)),
        ),
    ],
)
def test_version_policies(pbtxt: str, yaml_text: str, policy: VersionPolicy) -> None:
    assert _pbtxt(pbtxt).version_policy == policy
    assert _yaml(yaml_text).version_policy == policy


def test_instance_groups() -> None:
    config = _pbtxt(
        """
        instance_group [
          { count: 1 kind: KIND_GPU gpus: [ 0 ] },
          { name: "pair" count: 2 kind: KIND_GPU gpus: [ 1, 2 ] },
          { kind: KIND_CPU }
        ]
        """
    )
    assert config.instance_group == (
        InstanceGroup(count=1, kind="KIND_GPU", gpus=(0,)),
        InstanceGroup(name="pair", count=2, kind="KIND_GPU", gpus=(1, 2)),
        InstanceGroup(kind="KIND_CPU"),
    )


def test_dynamic_batching_with_queue_policies() -> None:
    expected = DynamicBatching(
        preferred_batch_size=(4, 8),
        max_queue_delay_microseconds=100,
        preserve_ordering=True,
        priority_levels=2,
        default_priority_level=2,
        default_queue_policy=QueuePolicy(
            timeout_action="DELAY",
            default_timeout_microseconds=1000,
            allow_timeout_override=True,
            max_queue_size=16,
        ),
        priority_queue_policy={1: QueuePolicy(max_queue_size=4), 2: QueuePolicy()},
    )
    pbtxt = _pbtxt(
        """
        dynamic_batching {
          preferred_batch_size: [ 4, 8 ]
          max_queue_delay_microseconds: 100
          preserve_ordering: true
          priority_levels: 2
          default_priority_level: 2
          default_queue_policy {
            timeout_action: DELAY
            default_timeout_microseconds: 1000
            allow_timeout_override: true
            max_queue_size: 16
          }
          priority_queue_policy { key: 1 value { max_queue_size: 4 } }
          priority_queue_policy { key: 2 value { } }
        }
        """
    )
    yaml_dict_map = _yaml(
        """
        dynamic_batching:
          preferred_batch_size: [4, 8]
          max_queue_delay_microseconds: 100
          preserve_ordering: true
          priority_levels: 2
          default_priority_level: 2
          default_queue_policy: {timeout_action: DELAY, default_timeout_microseconds: 1000,
                                 allow_timeout_override: true, max_queue_size: 16}
          priority_queue_policy:
            1: {max_queue_size: 4}
            2:
        """
    )
    yaml_entry_list = _yaml(
        yaml.safe_dump(
            {
                "dynamic_batching": {
                    **expected.model_dump(exclude={"priority_queue_policy"}),
                    "priority_queue_policy": [
                        {"key": 1, "value": {"max_queue_size": 4}},
                        {"key": 2},
                    ],
                }
            }
        )
    )
    assert pbtxt.dynamic_batching == expected
    assert yaml_dict_map.dynamic_batching == expected
    assert yaml_entry_list.dynamic_batching == expected


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("dynamic_batching { }", "pbtxt"),
        ("dynamic_batching:", "yaml"),
        ("dynamic_batching: {}", "yaml"),
    ],
)
def test_an_empty_dynamic_batching_enables_it(text: str, fmt: str) -> None:
    config = _pbtxt(text) if fmt == "pbtxt" else _yaml(text)
    assert config.dynamic_batching == DynamicBatching()


def test_parameters_in_every_spelling() -> None:
    pbtxt = _pbtxt(
        """
        parameters { key: "a" value: { string_value: "1" } }
        parameters [ { key: "b" value { string_value: "x y" } }, { key: "c" } ]
        """
    )
    yaml_config = _yaml(
        """
        parameters:
          a: 1
          b: {string_value: x y}
          c:
        """
    )
    yaml_entries = _yaml(
        """
        parameters:
          - {key: a, value: {string_value: "1"}}
          - {key: b, value: x y}
          - {key: c, value: {}}
        """
    )
    expected = {"a": "1", "b": "x y", "c": ""}
    assert pbtxt.parameters == yaml_config.parameters == yaml_entries.parameters == expected
    assert _yaml("parameters: {a: true, b: off, 3: 1.5}").parameters == {
        "a": "true",
        "b": "false",
        "3": "1.5",
    }


def test_platform_backend_and_filename() -> None:
    config = _pbtxt(
        'platform: "onnxruntime_onnx" backend: "onnxruntime" default_model_filename: "m.onnx"'
    )
    assert (config.platform, config.backend, config.default_model_filename) == (
        "onnxruntime_onnx",
        "onnxruntime",
        "m.onnx",
    )


def test_yaml_fields_without_a_value_keep_their_defaults() -> None:
    config = _yaml("platform:\nmax_batch_size:\ninput: \n")
    assert config == ModelConfig(name="m")


# --------------------------------------------------------------------------- not supported


@pytest.mark.parametrize(
    ("text", "listed"),
    [
        (
            "sequence_batching { direct { } lastest: 1 }",
            ["sequence_batching.lastest (unknown field)"],
        ),
        (
            "optimization { execution_accelerators { cpu_execution_accelerator "
            '[ { name: "openvino" } ] } eager_batching: true }',
            ["optimization.eager_batching (not supported yet)"],
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "n" } ]',
            ["batch_input (not supported yet)"],
        ),
        ('runtime: "libtorch.so"', ["runtime (not supported yet)"]),
        (
            'cc_model_filenames { key: "7.5" value: "a.plan" }',
            ["cc_model_filenames (not supported yet)"],
        ),
        ("max_batchsize: 8", ["max_batchsize (unknown field)"]),
        ("max_batchsize: 0", ["max_batchsize (unknown field)"]),
        (
            'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] format: FORMAT_NCHW '
            "allow_ragged_batch: true dim: [ 2 ] } ]",
            [
                "input[0].allow_ragged_batch (not supported yet)",
                "input[0].dim (unknown field)",
            ],
        ),
        (
            'output [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "l.txt" '
            "optional: true } ]",
            ["output[0].optional (unknown field)"],
        ),
        (
            "instance_group [ { kind: KIND_CPU }, { kind: KIND_GPU rate_limiter { priority: 2 } "
            'host_policy: "p" passive: true profile: "0" coun: 2 } ]',
            [
                "instance_group[1].host_policy (not supported yet)",
                "instance_group[1].passive (not supported yet)",
                "instance_group[1].profile (not supported yet)",
                "instance_group[1].coun (unknown field)",
            ],
        ),
        (
            "dynamic_batching { max_queue_delay: 5 default_queue_policy { size: 1 } "
            "priority_levels: 1 priority_queue_policy { key: 1 value { timeout: 2 } } }",
            [
                "dynamic_batching.max_queue_delay (unknown field)",
                "dynamic_batching.default_queue_policy.size (unknown field)",
                "dynamic_batching.priority_queue_policy[1].timeout (unknown field)",
            ],
        ),
        (
            "version_policy { lastest { num_versions: 2 } }",
            ["version_policy.lastest (unknown field)"],
        ),
        (
            "version_policy { specific { versions: 1 version: 2 } }",
            ["version_policy.specific.version (unknown field)"],
        ),
        (
            'parameters { key: "k" value { string_value: "v" int_value: 3 } }',
            ["parameters[k].int_value (unknown field)"],
        ),
        (
            'input [ { name: "a" data_type: TYPE_FP32 reshape { shape: [ 1 ] dims: 2 } } ]',
            ["input[0].reshape.dims (unknown field)"],
        ),
    ],
)
def test_unsupported_and_unknown_fields_are_listed_not_fatal(text: str, listed: list[str]) -> None:
    assert list(_pbtxt(text).unsupported_fields) == listed


def test_a_decoupled_model_is_read_and_served_back() -> None:
    config = _pbtxt("model_transaction_policy { decoupled: true }")
    assert config.model_transaction_policy.decoupled
    assert config.unsupported_fields == ()
    assert config.to_triton_dict()["model_transaction_policy"] == {"decoupled": True}


def test_unsupported_fields_at_their_zero_value_are_not_listed() -> None:
    config = _pbtxt(
        """
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] format: FORMAT_NONE
                  allow_ragged_batch: false is_non_linear_format_io: false } ]
        output [ { name: "b" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "" } ]
        instance_group [ { kind: KIND_CPU passive: false host_policy: "" profile: [ ]
                           secondary_devices: [ ] } ]
        model_warmup: [ ]
        runtime: ""
        """
    )
    assert config.unsupported_fields == ()


def test_yaml_lists_unsupported_fields_too() -> None:
    config = _yaml("batch_input: [{target_name: [x]}]\nmax_batchsize: 4\n3: x\n")
    assert config.unsupported_fields == (
        "batch_input (not supported yet)",
        "max_batchsize (unknown field)",
        "3 (unknown field)",
    )


@pytest.mark.parametrize("fmt", ["yaml", "pbtxt"])
def test_the_rendered_triton_config_reads_back_unchanged(fmt: str) -> None:
    """The JSON that /v2/models/{m}/config returns, saved as a config file, is the same config
    and has nothing unsupported in it (its zero-valued extras are not listed)."""
    rendered = EXPECTED.to_triton_dict()
    if fmt == "yaml":
        config = _yaml(yaml.safe_dump(rendered), name="resnet")
    else:
        # Triton's JSON renders maps as objects; text format writes them as entries.
        rendered["parameters"] = [{"key": k, "value": v} for k, v in rendered["parameters"].items()]
        batching = rendered["dynamic_batching"]
        batching["priority_queue_policy"] = [
            {"key": int(k), "value": v} for k, v in batching["priority_queue_policy"].items()
        ]
        config = config_from_dict(rendered, "resnet", "resnet/config.pbtxt")
    assert config.unsupported_fields == ()
    assert config.to_triton_dict() == EXPECTED.to_triton_dict()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        (
            "max_batch_size: -1",
            "pbtxt",
            "m/config.pbtxt: max_batch_size: expected greater than or equal to 0, got -1",
        ),
        (
            'max_batch_size: "x"',
            "pbtxt",
            "m/config.pbtxt: max_batch_size: expected a valid integer, unable to parse string "
            "as an integer, got 'x'",
        ),
        (
            'input [ { name: "a" data_type: TYPE_FLOAT dims: [ 0 ] }, { data_type: TYPE_FP32 } ]',
            "pbtxt",
            "m/config.pbtxt: input[0].data_type: unknown data_type 'TYPE_FLOAT', expected a "
            "TYPE_* name such as TYPE_FP32 or a V2 datatype such as FP32\n"
            "m/config.pbtxt: input[0].dims: dims must be positive or -1 (variable), got [0]\n"
            "m/config.pbtxt: input[1].name: is required",
        ),
        (
            'output { name: "a" data_type: TYPE_FP32 dims: [ 2, "x" ] }',
            "pbtxt",
            "m/config.pbtxt: output[0].dims[1]: expected a valid integer, unable to parse "
            "string as an integer, got 'x'",
        ),
        (
            'output { name: "a" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 2, -2 ] } }',
            "pbtxt",
            "m/config.pbtxt: output[0].reshape.shape: dims must be positive or -1 (variable), "
            "got [2, -2]",
        ),
        (
            'input [ { name: "a" data_type: TYPE_FP32 }, { name: "a" data_type: TYPE_FP32 } ]',
            "pbtxt",
            "m/config.pbtxt: input 'a' is declared twice",
        ),
        (
            "instance_group [ { kind: KIND_TPU count: 0 } ]",
            "pbtxt",
            "m/config.pbtxt: instance_group[0].count: expected greater than or equal to 1, got 0\n"
            "m/config.pbtxt: instance_group[0].kind: expected 'KIND_AUTO', 'KIND_CPU', "
            "'KIND_GPU' or 'KIND_MODEL', got 'KIND_TPU'",
        ),
        (
            "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "pbtxt",
            "m/config.pbtxt: instance_group[0].gpus: a KIND_CPU group cannot list GPUs",
        ),
        (
            "version_policy { latest { num_versions: 0 } }",
            "pbtxt",
            "m/config.pbtxt: version_policy.latest.num_versions: expected greater than or "
            "equal to 1, got 0",
        ),
        (
            'version_policy { specific { versions: [ "one" ] } }',
            "pbtxt",
            "m/config.pbtxt: version_policy.specific.versions[0]: expected a valid integer, "
            "unable to parse string as an integer, got 'one'",
        ),
        (
            "version_policy { all { } latest { } }",
            "pbtxt",
            "m/config.pbtxt: version_policy: expected one of latest, all or specific, "
            "got all and latest",
        ),
        (
            "version_policy: latest",
            "yaml",
            "m/config.yaml: version_policy: expected a message { ... }, got 'latest'",
        ),
        (
            "input: [5, {name: a, data_type: FP32}]",
            "yaml",
            "m/config.yaml: input[0]: expected a message { ... }, got 5",
        ),
        (
            "dynamic_batching { default_queue_policy { timeout_action: WAIT } }",
            "pbtxt",
            "m/config.pbtxt: dynamic_batching.default_queue_policy.timeout_action: expected "
            "'REJECT' or 'DELAY', got 'WAIT'",
        ),
        (
            'dynamic_batching { priority_queue_policy { key: "high" value { } } }',
            "pbtxt",
            "m/config.pbtxt: dynamic_batching.priority_queue_policy[high].key: expected a valid "
            "integer, unable to parse string as an integer, got 'high'",
        ),
        (
            "dynamic_batching { priority_levels: 1 "
            "priority_queue_policy { key: 1 value { max_queue_size: -4 } } }",
            "pbtxt",
            "m/config.pbtxt: dynamic_batching.priority_queue_policy[1].max_queue_size: expected "
            "greater than or equal to 0, got -4",
        ),
        (
            "dynamic_batching { priority_queue_policy { value { } } }",
            "pbtxt",
            "m/config.pbtxt: dynamic_batching.priority_queue_policy[0]: a map entry needs a key",
        ),
        (
            'parameters { key: "a" } parameters { key: "a" }',
            "pbtxt",
            "m/config.pbtxt: parameters: key 'a' is given twice",
        ),
        (
            "parameters: {a: [1, 2]}",
            "yaml",
            "m/config.yaml: parameters[a].string_value: expected a string, got [1, 2]",
        ),
        (
            "parameters: [{key: [1], value: x}]",
            "yaml",
            "m/config.yaml: parameters: expected a string or integer key, got [1]",
        ),
        (
            "parameters: {on: x}",
            "yaml",
            "m/config.yaml: parameters: expected a string or integer key, got True (quote the key)",
        ),
        (
            "dynamic_batching: {preserve_ordering: maybe}",
            "yaml",
            "m/config.yaml: dynamic_batching.preserve_ordering: expected a valid boolean, "
            "unable to interpret input, got 'maybe'",
        ),
        (
            "platform: 3",
            "yaml",
            "m/config.yaml: platform: expected a valid string, got 3",
        ),
    ],
)
def test_validation_errors_name_file_field_and_expectation(
    text: str, fmt: str, message: str
) -> None:
    assert _error(text, fmt) == message


def test_a_long_bad_value_is_shortened_in_the_message() -> None:
    message = _error("platform: [" + ", ".join(["1234567890"] * 20) + "]", "yaml")
    assert message.startswith("m/config.yaml: platform: expected a valid string, got [")
    assert message.endswith("...")
    assert len(message) < 150


# --------------------------------------------------------------------------- complete_config


def _t(name: str, datatype: str, *dims: int) -> TensorConfig:
    return TensorConfig(name=name, data_type=datatype, dims=dims)


BATCHABLE_IN = [_t("x", "FP32", -1, 4), _t("ids", "INT64", -1, -1)]
BATCHABLE_OUT = [_t("y", "FP32", -1, 2)]


def test_no_config_is_completed_like_tritons_autocomplete() -> None:
    config = complete_config(None, "m", BATCHABLE_IN, BATCHABLE_OUT)
    assert config == ModelConfig(
        name="m",
        max_batch_size=DEFAULT_MAX_BATCH_SIZE,
        input=(_t("x", "FP32", 4), _t("ids", "INT64", -1)),
        output=(_t("y", "FP32", 2),),
        dynamic_batching=DynamicBatching(),
    )
    assert DEFAULT_MAX_BATCH_SIZE == 4


def test_a_model_with_a_fixed_first_dim_does_not_batch() -> None:
    config = complete_config(None, "m", [_t("x", "FP32", 1, 4)], BATCHABLE_OUT)
    assert config.max_batch_size == 0
    assert config.dynamic_batching is None
    assert config.input == (_t("x", "FP32", 1, 4),)
    assert config.output == (_t("y", "FP32", -1, 2),)


def test_scalars_become_dims_1_reshaped_to_nothing() -> None:
    batched = complete_config(None, "m", [_t("n", "INT32", -1)], [_t("y", "FP32", -1)])
    assert batched.input == (TensorConfig(name="n", data_type="INT32", dims=(1,), reshape=()),)
    unbatched = complete_config(None, "m", [_t("n", "INT32")], [_t("y", "FP32", 3)])
    assert unbatched.max_batch_size == 0
    assert unbatched.input == (TensorConfig(name="n", data_type="INT32", dims=(1,), reshape=()),)


def test_a_config_without_max_batch_size_gets_the_default() -> None:
    config = complete_config(
        _pbtxt('platform: "onnxruntime_onnx"'), "m", BATCHABLE_IN, BATCHABLE_OUT
    )
    assert config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert config.dynamic_batching == DynamicBatching()
    assert config.platform == "onnxruntime_onnx"


def test_an_explicit_max_batch_size_0_is_kept() -> None:
    config = complete_config(_pbtxt("max_batch_size: 0"), "m", BATCHABLE_IN, BATCHABLE_OUT)
    assert config.max_batch_size == 0
    assert config.dynamic_batching is None
    assert config.input == tuple(BATCHABLE_IN)
    assert config.output == tuple(BATCHABLE_OUT)


@pytest.mark.parametrize(
    ("text", "batching"),
    [
        ("max_batch_size: 8", DynamicBatching()),
        ("max_batch_size: 1", None),
        (
            "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 7 }",
            DynamicBatching(max_queue_delay_microseconds=7),
        ),
        ("max_batch_size: 8 sequence_batching { }", None),
    ],
)
def test_dynamic_batching_is_turned_on_when_no_scheduler_is_given(
    text: str, batching: DynamicBatching | None
) -> None:
    config = complete_config(_pbtxt(text), "m", BATCHABLE_IN, BATCHABLE_OUT)
    assert config.dynamic_batching == batching


def test_max_batch_size_on_a_model_that_cannot_batch_is_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        complete_config(
            _pbtxt("max_batch_size: 8"),
            "m",
            [_t("x", "FP32", 1, 4), _t("n", "INT32")],
            BATCHABLE_OUT,
        )
    assert str(info.value) == (
        "model 'm': max_batch_size is 8 but the model cannot batch: every input and output "
        "needs a variable (-1) first dimension, and these do not: 'x' [1, 4], 'n' []; "
        "set max_batch_size: 0"
    )


def test_declared_tensors_are_kept_and_missing_inputs_added() -> None:
    config = complete_config(
        _pbtxt(
            'max_batch_size: 8 input { name: "ids" data_type: TYPE_INT64 dims: [ 16 ] '
            "optional: true }"
        ),
        "m",
        BATCHABLE_IN,
        BATCHABLE_OUT,
    )
    assert config.input == (
        TensorConfig(name="ids", data_type="INT64", dims=(16,), optional=True),
        _t("x", "FP32", 4),
    )
    assert config.output == (_t("y", "FP32", 2),)


def test_declared_outputs_are_not_added_to() -> None:
    outputs = [_t("y", "FP32", -1, 2), _t("z", "FP32", -1)]
    config = complete_config(
        _pbtxt(
            'max_batch_size: 8 output { name: "z" data_type: TYPE_FP32 dims: [ 1 ] '
            "reshape { shape: [] } }"
        ),
        "m",
        BATCHABLE_IN,
        outputs,
    )
    assert [o.name for o in config.output] == ["z"]


def test_other_fields_survive_completion() -> None:
    config = complete_config(
        _pbtxt(PBTXT.replace('name: "resnet"', ""), "resnet"),
        "resnet",
        [_t("input", "FP32", -1, 3, 224, 224)],
        [_t("probs", "FP32", -1, 1000)],
    )
    assert _honoured(config) == EXPECTED


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'input { name: "image" data_type: TYPE_FP32 dims: [ 4 ] }',
            "model 'm': the config declares input 'image' but the model has no such input "
            "(its inputs: 'x', 'ids')",
        ),
        (
            'output { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }',
            "model 'm': the config declares output 'x' but the model has no such output "
            "(its outputs: 'y')",
        ),
        (
            'input { name: "x" data_type: TYPE_FP16 dims: [ 4 ] }',
            "model 'm': input 'x' is declared FP16 in the config but is FP32 in the model",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [ 5 ] }',
            "model 'm': input 'x' has dims [5] in the config (with the batch dimension: "
            "[-1, 5]), which does not fit the model's shape [-1, 4]",
        ),
        (
            'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] }',
            "model 'm': input 'x' has dims [2, 2] in the config (with the batch dimension: "
            "[-1, 2, 2]), which does not fit the model's shape [-1, 4]",
        ),
        (
            'max_batch_size: 0 input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }',
            "model 'm': input 'x' has dims [4] in the config (max_batch_size is 0, so dims are "
            "the full shape, batch dimension included), which does not fit the model's shape "
            "[-1, 4]",
        ),
        (
            'max_batch_size: 0 input { name: "x" data_type: TYPE_FP32 dims: [ 3, 4, 5 ] }',
            "model 'm': input 'x' has dims [3, 4, 5] in the config, which does not fit the "
            "model's shape [-1, 4]",
        ),
        (
            'max_batch_size: 8 output { name: "y" data_type: TYPE_FP32 dims: [ 2 ] '
            "reshape { shape: [ 1, 2 ] } }",
            "model 'm': output 'y' has reshape [1, 2] in the config (with the batch dimension: "
            "[-1, 1, 2]), which does not fit the model's shape [-1, 2]",
        ),
    ],
)
def test_declared_tensors_must_match_the_model(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        complete_config(_pbtxt(text), "m", BATCHABLE_IN, BATCHABLE_OUT)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "text",
    [
        # -1 on either side fits anything
        'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [ -1 ] }',
        'max_batch_size: 8 input { name: "ids" data_type: TYPE_INT64 dims: [ 7 ] }',
        'max_batch_size: 0 input { name: "x" data_type: TYPE_FP32 dims: [ 2, 4 ] }',
        # reshape is what the model sees
        'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] '
        "reshape { shape: [ 4 ] } }",
    ],
)
def test_compatible_declarations(text: str) -> None:
    complete_config(_pbtxt(text), "m", BATCHABLE_IN, BATCHABLE_OUT)


def test_model_dims_that_cannot_be_declared_are_a_config_error() -> None:
    zero = TensorConfig.model_construct(
        name="x", data_type="FP32", dims=(0, 2), reshape=None, optional=False, is_shape_tensor=False
    )
    with pytest.raises(ConfigError) as info:
        complete_config(None, "m", [zero], [_t("y", "FP32", 2)])
    assert str(info.value) == (
        "model 'm': input[0].dims: dims must be positive or -1 (variable), got [0, 2]"
    )


# --------------------------------------------------------------------------- properties

_NAMES = st.sampled_from(
    sorted(
        {*ModelConfig.model_fields, *TensorConfig.model_fields, *DynamicBatching.model_fields}
        | {*QueuePolicy.model_fields, "latest", "all", "specific", "num_versions", "versions"}
        | {"key", "value", "string_value", "shape", "sequence_batching", "format"}
    )
)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(_NAMES | st.text(max_size=5) | st.integers(), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_NAMES, _VALUES, max_size=6))
def test_any_structure_gives_a_config_or_a_config_error(raw: dict[str, Any]) -> None:
    try:
        config = config_from_dict(raw, "m", "m/config.yaml")
    except ConfigError as exc:
        assert all(line.startswith("m/config.yaml: ") for line in str(exc).splitlines())
    else:
        assert config.name == "m"


def test_scheduling_rate_limiter_and_response_cache_are_read(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.pbtxt").write_text(
        """
        max_batch_size: 8
        instance_group [ { count: 2 kind: KIND_CPU rate_limiter {
            resources [ { name: "R1" count: 2 }, { name: "R2" global: true count: 1 } ]
            priority: 2 } } ]
        scheduling { weight: 4 slo_p99_ms: 20 }
        response_cache { enable: true }
        """
    )
    config = read_model_config(model)
    assert config is not None and not config.unsupported_fields
    limiter = config.instance_group[0].rate_limiter
    assert limiter is not None and limiter.priority == 2
    assert [(r.name, r.count, r.global_) for r in limiter.resources] == [
        ("R1", 2, False),
        ("R2", 1, True),
    ]
    assert (config.scheduling.weight, config.scheduling.slo_p99_ms) == (4.0, 20.0)
    assert config.response_cache.enable
    rendered = config.to_triton_dict()
    assert rendered["response_cache"] == {"enable": True}
    assert rendered["instance_group"][0]["rate_limiter"]["resources"][1]["global"] is True


def test_a_config_name_reads_configs_name_pbtxt_where_the_model_has_it(tmp_path: Path) -> None:
    from inferplex.config.readers import use_config_name

    model = tmp_path / "resnet"
    (model / "configs").mkdir(parents=True)
    (model / "config.pbtxt").write_text(PBTXT)
    (model / "configs" / "h100.pbtxt").write_text(
        PBTXT.replace("max_batch_size: 8", "max_batch_size: 32")
    )
    try:
        use_config_name("h100")
        config = read_model_config(model)
        assert config is not None and config.max_batch_size == 32
        use_config_name("a100")  # no configs/a100.pbtxt: the config file, as Triton
        config = read_model_config(model)
        assert config is not None and config.max_batch_size == 8
        (model / "configs" / "h100.pbtxt").write_text("max_batch_size: [")
        use_config_name("h100")
        with pytest.raises(ConfigError, match=r"resnet/configs/h100\.pbtxt"):
            read_model_config(model)
    finally:
        use_config_name("")
    config = read_model_config(model)
    assert config is not None and config.max_batch_size == 8
