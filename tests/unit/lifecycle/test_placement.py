"""KIND_AUTO placement: light models on the CPU, heavy ones on a GPU when there is one. The
GPU is given as present or not, so the decision is checked on any machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples import modelgen
from inferplex.config.model_config import InstanceGroup, ModelConfig
from inferplex.config.writers import write_config
from inferplex.errors import ConfigError
from inferplex.lifecycle.placement import (
    DEFAULT_GPU_MIN_BYTES,
    GPU_MIN_BYTES_PARAMETER,
    auto_kind,
    model_bytes,
)
from inferplex.lifecycle.planning import _instances, plan_model
from inferplex.repository.local import list_files

AUTO = InstanceGroup()


def config(**parameters: str) -> ModelConfig:
    return ModelConfig(name="m", parameters=parameters)


def test_heavy_models_go_to_the_gpu_light_ones_stay_on_the_cpu() -> None:
    assert auto_kind(config(), AUTO, DEFAULT_GPU_MIN_BYTES, gpu=True) == "KIND_GPU"
    assert auto_kind(config(), AUTO, DEFAULT_GPU_MIN_BYTES - 1, gpu=True) == "KIND_CPU"
    assert auto_kind(config(), AUTO, 10 * DEFAULT_GPU_MIN_BYTES, gpu=False) == "KIND_CPU"


def test_the_threshold_is_a_model_parameter() -> None:
    small = config(**{GPU_MIN_BYTES_PARAMETER: "1000"})
    assert auto_kind(small, AUTO, 1000, gpu=True) == "KIND_GPU"
    assert auto_kind(config(**{GPU_MIN_BYTES_PARAMETER: "0"}), AUTO, 0, gpu=True) == "KIND_GPU"
    for bad in ("-1", "big"):
        for gpu in (True, False):  # a bad value fails on a CPU machine too
            with pytest.raises(ConfigError, match=f"{GPU_MIN_BYTES_PARAMETER} must be a non-neg"):
                auto_kind(config(**{GPU_MIN_BYTES_PARAMETER: bad}), AUTO, 0, gpu=gpu)


def test_a_group_listing_gpus_goes_to_the_gpu_whatever_its_size() -> None:
    assert auto_kind(config(), InstanceGroup(gpus=(1,)), 10, gpu=True) == "KIND_GPU"


def test_model_bytes_counts_the_files_beside_the_model(tmp_path: Path) -> None:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes(b"x" * 100)
    (version / "weights.bin").write_bytes(b"x" * 900)  # ONNX external data
    assert model_bytes(version / "model.onnx") == 1000


def test_instances_mix_placements_per_group() -> None:
    groups = (InstanceGroup(count=2), InstanceGroup(kind="KIND_CPU"))
    model = ModelConfig(name="m", instance_group=groups)
    heavy = _instances(model, 1, gpu=True, size=DEFAULT_GPU_MIN_BYTES)
    assert [s.kind for s in heavy] == ["KIND_GPU", "KIND_GPU", "KIND_CPU"]
    light = _instances(model, 1, gpu=True, size=1000)
    assert [s.kind for s in light] == ["KIND_CPU"] * 3


def test_a_repository_model_is_placed_on_the_cpu_without_a_gpu(tmp_path: Path) -> None:
    path = modelgen.mlp(tmp_path, "big")  # whatever its size, there is no GPU here
    write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
    plan = plan_model(path.parent.parent)
    if plan.backend.gpu_available():
        pytest.skip("this machine has a GPU")
    assert {spec.kind for spec in plan.instances} == {"KIND_CPU"}


def test_a_version_s_size_from_the_load_s_own_walk_equals_a_walk_of_its_folder(
    tmp_path: Path,
) -> None:
    model = modelgen.add_sub(tmp_path)
    (model.parent / "weights.bin").write_bytes(bytes(1000))
    (tmp_path / "add_sub" / "2").mkdir()
    (tmp_path / "add_sub" / "2" / "other.bin").write_bytes(bytes(50))  # another version's
    listed = list_files(tmp_path / "add_sub")
    assert model_bytes(model, listed) == model_bytes(model) == model.stat().st_size + 1000
