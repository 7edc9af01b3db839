"""Planning a model's load: files, versions, instances and their placement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from examples import modelgen
from inferplex.config.writers import to_pbtxt
from inferplex.errors import ConfigError
from inferplex.lifecycle.planning import LIGHT_MODEL_BYTES, plan_model


def add_sub_model(repo: Path, extra: str = "") -> Path:
    path = modelgen.add_sub(repo)
    config = to_pbtxt(modelgen.model_config(path, max_batch_size=8)) + extra
    (repo / "add_sub" / "config.pbtxt").write_text(config)
    return repo / "add_sub"


def test_gpu_group_without_a_gpu_fails_with_the_reason(tmp_path: Path) -> None:
    model = add_sub_model(tmp_path, "instance_group [ { kind: KIND_GPU } ]\n")
    with pytest.raises(ConfigError, match=r"instance_group\[0\] asks for KIND_GPU .*allow_cpu"):
        plan_model(model)


def test_gpu_group_falls_back_to_cpu_when_allowed(tmp_path: Path) -> None:
    model = add_sub_model(
        tmp_path,
        "instance_group [ { kind: KIND_GPU count: 2 } ]\n"
        'parameters { key: "allow_cpu_fallback" value { string_value: "true" } }\n',
    )
    plan = plan_model(model)
    assert [spec.kind for spec in plan.instances] == ["KIND_CPU", "KIND_CPU"]


def test_auto_kind_is_cpu_here_and_threads_divide_the_cores(tmp_path: Path) -> None:
    model = add_sub_model(tmp_path, "instance_group [ { count: 2 } ]\n")
    plan = plan_model(model, server_intra_op_threads=0)
    assert [spec.kind for spec in plan.instances] == ["KIND_CPU", "KIND_CPU"]
    assert all(s.intra_op_threads == max(1, (os.cpu_count() or 1) // 2) for s in plan.instances)


def test_a_light_model_gets_one_intra_op_thread_a_heavy_one_the_cores(tmp_path: Path) -> None:
    light = add_sub_model(tmp_path / "light", "")
    assert plan_model(light).instances[0].intra_op_threads == 1
    heavy = add_sub_model(tmp_path / "heavy", "")
    # weights beside the model file count towards its size (ONNX external data)
    (heavy / "1" / "weights.bin").write_bytes(bytes(LIGHT_MODEL_BYTES))
    assert plan_model(heavy).instances[0].intra_op_threads == (os.cpu_count() or 1)


def test_thread_parameter_overrides_the_server_setting(tmp_path: Path) -> None:
    model = add_sub_model(
        tmp_path, 'parameters { key: "intra_op_thread_count" value { string_value: "3" } }\n'
    )
    assert plan_model(model, server_intra_op_threads=1).instances[0].intra_op_threads == 3
    bad = add_sub_model(
        tmp_path / "b", 'parameters { key: "intra_op_thread_count" value { string_value: "x" } }\n'
    )
    with pytest.raises(ConfigError, match="intra_op_thread_count must be an integer"):
        plan_model(bad)


def test_version_policy_selects_files(tmp_path: Path) -> None:
    model = add_sub_model(tmp_path, "version_policy { all { } }\n")
    modelgen.add_sub(tmp_path, version=3)
    plan = plan_model(model)
    assert sorted(plan.version_files) == [1, 3]


def test_platform_and_backend_are_both_named(tmp_path: Path) -> None:
    """As Triton renders configs: a model without a config file, or with either name only."""
    modelgen.add_sub(tmp_path)  # no config file: completed from the ONNX signature
    config = plan_model(tmp_path / "add_sub").config
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")
    model = add_sub_model(tmp_path)  # names the platform only
    config = plan_model(model).config
    assert (config.platform, config.backend) == ("onnxruntime_onnx", "onnxruntime")


def test_missing_version_folder_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no version folder"):
        plan_model(tmp_path / "empty")
    model = add_sub_model(tmp_path / "r")
    (model / "2").mkdir()
    with pytest.raises(ConfigError, match="model file"):
        plan_model(model)


AUTO_COMPLETING = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
        config.set_max_batch_size(2)
        return config

    def execute(self, requests):
        return []
"""


def test_a_python_model_completes_its_config_unless_completion_is_off(tmp_path: Path) -> None:
    (tmp_path / "py" / "1").mkdir(parents=True)
    (tmp_path / "py" / "1" / "model.py").write_text(AUTO_COMPLETING)
    plan = plan_model(tmp_path / "py")
    assert plan.config.backend == "python"
    assert plan.config.max_batch_size == 2
    assert [t.name for t in plan.config.input] == ["IN"]
    with pytest.raises(ConfigError, match="no config file, and configs are not completed"):
        plan_model(tmp_path / "py", auto_complete=False)


def test_with_completion_off_a_config_is_taken_as_written(tmp_path: Path) -> None:
    model = add_sub_model(tmp_path)
    (model / "config.pbtxt").write_text('name: "add_sub"\nplatform: "onnxruntime_onnx"\n')
    assert plan_model(model).config.max_batch_size > 0  # completed from the ONNX file
    written = plan_model(model, auto_complete=False).config
    assert (written.max_batch_size, written.input, written.dynamic_batching) == (0, (), None)


def test_instance_counts_are_capped_however_they_are_set(tmp_path: Path) -> None:
    """--max-model-instances: the groups of a config add up; the server's own default for a
    composite model keeps within the cap."""
    model = add_sub_model(tmp_path, "instance_group [ { count: 2 }, { count: 2 } ]\n")
    assert len(plan_model(model, max_instances=4).instances) == 4
    with pytest.raises(ConfigError, match=r"asks for 4 instances .* limit of 3 \(--max-model-ins"):
        plan_model(model, max_instances=3)
    ensemble = tmp_path / "pipeline"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        'name: "pipeline"\nplatform: "ensemble"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'ensemble_scheduling { step [ { model_name: "add_sub" model_version: -1 '
        'input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } '
        "} ] }\n"
    )
    assert len(plan_model(ensemble, max_instances=2).instances) == 2
