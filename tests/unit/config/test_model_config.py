"""ModelConfig itself: validation, version selection, shapes, and the Triton JSON rendering
that perf_analyzer and tritonclient read."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from inferplex.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorConfig,
    VersionPolicy,
)
from inferplex.datatypes import V2_DATATYPES, V2_TO_TRITON


@pytest.mark.parametrize("datatype", sorted(V2_DATATYPES))
def test_datatypes_are_stored_as_v2_names(datatype: str) -> None:
    triton = V2_TO_TRITON[datatype]
    assert TensorConfig(name="t", data_type=triton).data_type == datatype
    assert TensorConfig(name="t", data_type=datatype).data_type == datatype
    assert TensorConfig(name="t", data_type=datatype.lower()).data_type == datatype


@pytest.mark.parametrize("bad", ["TYPE_FLOAT", "float32", "TYPE_BF16", ""])
def test_an_unknown_datatype_is_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="unknown data_type"):
        TensorConfig(name="t", data_type=bad)


@pytest.mark.parametrize("dims", [(0,), (4, -2), (-3,)])
def test_dims_must_be_positive_or_variable(dims: tuple[int, ...]) -> None:
    with pytest.raises(ValidationError, match="dims must be positive or -1"):
        TensorConfig(name="t", data_type="FP32", dims=dims)
    with pytest.raises(ValidationError, match="dims must be positive or -1"):
        TensorConfig(name="t", data_type="FP32", dims=(4,), reshape=dims)


def test_an_empty_reshape_is_a_scalar() -> None:
    assert TensorConfig(name="t", data_type="FP32", dims=(1,), reshape=()).reshape == ()


@pytest.mark.parametrize("kind", ["input", "output"])
def test_a_tensor_name_may_be_declared_once(kind: str) -> None:
    tensor = TensorConfig(name="t", data_type="FP32", dims=(1,))
    with pytest.raises(ValidationError, match=f"{kind} 't' is declared twice"):
        ModelConfig(name="m", **{kind: (tensor, tensor)})


def test_an_input_and_an_output_may_share_a_name() -> None:
    tensor = TensorConfig(name="t", data_type="FP32", dims=(1,))
    assert ModelConfig(name="m", input=(tensor,), output=(tensor,)).input == (tensor,)


def test_configs_are_frozen_and_forbid_unknown_fields() -> None:
    config = ModelConfig(name="m")
    with pytest.raises(ValidationError):
        config.max_batch_size = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="max_batchsize"):
        ModelConfig(name="m", max_batchsize=3)  # type: ignore[call-arg]


def test_defaults_follow_triton() -> None:
    config = ModelConfig(name="m")
    assert config.max_batch_size == 0
    assert not config.batched
    assert config.version_policy == VersionPolicy(policy="latest", num_versions=1)
    assert config.dynamic_batching is None
    assert InstanceGroup() == InstanceGroup(count=1, kind="KIND_AUTO")
    assert QueuePolicy().timeout_action == "REJECT"


@pytest.mark.parametrize(
    ("policy", "available", "selected"),
    [
        (VersionPolicy(), [1, 3, 2], [3]),
        (VersionPolicy(policy="latest", num_versions=2), [1, 3, 2], [2, 3]),
        (VersionPolicy(policy="latest", num_versions=5), [2, 1], [1, 2]),
        (VersionPolicy(policy="all"), [3, 1, 2], [1, 2, 3]),
        (VersionPolicy(policy="specific", versions=(1, 3)), [1, 2, 3], [1, 3]),
        (VersionPolicy(policy="specific", versions=(4,)), [1, 2, 3], []),
        (VersionPolicy(), [], []),
    ],
)
def test_version_policy_selects(
    policy: VersionPolicy, available: list[int], selected: list[int]
) -> None:
    assert policy.select(available) == selected


def test_full_shape_adds_the_batch_dimension_when_batched() -> None:
    tensor = TensorConfig(name="t", data_type="FP32", dims=(16,))
    assert ModelConfig(name="m", max_batch_size=8).full_shape(tensor) == [-1, 16]
    assert ModelConfig(name="m", max_batch_size=0).full_shape(tensor) == [16]


def test_triton_rendering_has_the_fields_perf_analyzer_reads() -> None:
    config = ModelConfig(
        name="m",
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=(TensorConfig(name="in", data_type="BYTES", dims=(1,), reshape=(), optional=True),),
        output=(TensorConfig(name="out", data_type="FP16", dims=(-1, 2)),),
        instance_group=(InstanceGroup(count=2, kind="KIND_CPU"),),
        version_policy=VersionPolicy(policy="specific", versions=(1, 3)),
        dynamic_batching=DynamicBatching(
            preferred_batch_size=(4,),
            priority_levels=1,
            default_queue_policy=QueuePolicy(max_queue_size=3),
            priority_queue_policy={1: QueuePolicy(timeout_action="DELAY")},
        ),
        parameters={"k": "v"},
    )
    rendered = config.to_triton_dict()
    assert rendered["name"] == "m"
    assert rendered["max_batch_size"] == 8
    assert rendered["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert rendered["input"][0] == {
        "name": "in",
        "data_type": "TYPE_STRING",
        "format": "FORMAT_NONE",
        "dims": [1],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": True,
        "reshape": {"shape": []},
    }
    assert rendered["output"][0]["data_type"] == "TYPE_FP16"
    assert rendered["output"][0]["dims"] == [-1, 2]
    assert rendered["instance_group"][0]["name"] == "m_0"
    assert rendered["instance_group"][0]["kind"] == "KIND_CPU"
    assert rendered["instance_group"][0]["count"] == 2
    assert rendered["parameters"] == {"k": {"string_value": "v"}}
    batching = rendered["dynamic_batching"]
    assert batching["preferred_batch_size"] == [4]
    assert batching["default_queue_policy"]["max_queue_size"] == 3
    assert batching["priority_queue_policy"]["1"]["timeout_action"] == "DELAY"


def test_no_dynamic_batching_key_without_dynamic_batching() -> None:
    # perf_analyzer looks at whether the key is present, not at its contents.
    assert "dynamic_batching" not in ModelConfig(name="m").to_triton_dict()
    assert (
        "dynamic_batching"
        in ModelConfig(name="m", dynamic_batching=DynamicBatching()).to_triton_dict()
    )


@pytest.mark.parametrize(
    ("policy", "rendered"),
    [
        (VersionPolicy(), {"latest": {"num_versions": 1}}),
        (VersionPolicy(policy="all"), {"all": {}}),
    ],
)
def test_version_policy_rendering(policy: VersionPolicy, rendered: dict) -> None:
    assert ModelConfig(name="m", version_policy=policy).to_triton_dict()["version_policy"] == (
        rendered
    )


@pytest.mark.parametrize(
    ("batching", "fragment"),
    [
        ({"priority_levels": 2, "default_priority_level": 3}, "default_priority_level 3"),
        ({"priority_levels": 2, "priority_queue_policy": {3: {}}}, "has level 3"),
    ],
)
def test_dynamic_batching_ranges_are_checked(batching: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        ModelConfig(name="m", max_batch_size=8, dynamic_batching=batching)
