"""Candidates as model configurations: served copies and --write, in both formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from examples import modelgen
from inferplex.config.readers import read_model_config
from inferplex.config.writers import write_config
from inferplex.lifecycle.planning import plan_model
from inferplex_tools.benchtool import BenchError
from inferplex_tools.tuner.configs import (
    apply,
    current_candidate,
    int8_quantizer,
    materialise,
    read_raw,
    write_best,
)
from inferplex_tools.tuner.space import Candidate


def _model(repo: Path, fmt: str, versions: int = 1) -> Path:
    for version in range(1, versions + 1):
        path = modelgen.add_sub(repo, version=version)
    config = modelgen.model_config(path, max_batch_size=8, instance_kind="KIND_CPU")
    if fmt == "yaml":
        config["parameters"] = {"other": "x"}
    write_config(repo / "add_sub", config, fmt)  # type: ignore[arg-type]
    return repo / "add_sub"


@pytest.mark.parametrize("fmt", ["pbtxt", "yaml"])
def test_write_best_keeps_the_format_and_the_server_reads_it(tmp_path: Path, fmt: str) -> None:
    model_dir = _model(tmp_path, fmt)
    written = write_best(model_dir, Candidate(4, 250, 2, 3), quantize=None)
    assert written == [model_dir / f"config.{fmt}"]
    config = read_model_config(model_dir)
    assert config is not None
    assert config.max_batch_size == 4
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(g.count, g.kind) for g in config.instance_group] == [(2, "KIND_CPU")]
    assert config.parameters["intra_op_thread_count"] == "3"
    if fmt == "yaml":
        assert config.parameters["other"] == "x"  # other parameters are kept
    plan = plan_model(model_dir)
    assert len(plan.instances) == 2 and plan.instances[0].intra_op_threads == 3


def test_apply_replaces_an_earlier_threads_parameter(tmp_path: Path) -> None:
    raw, _ = read_raw(_model(tmp_path, "pbtxt"))
    once = apply(raw, Candidate(8, 0, 1, 2), "x")
    twice = apply(once, Candidate(8, 0, 1, 4), "x")
    assert twice["parameters"] == [{"key": "intra_op_thread_count", "value": {"string_value": "4"}}]
    assert raw.get("parameters") is None  # the original is not touched


def test_materialise_links_the_versions_under_candidate_names(tmp_path: Path) -> None:
    model_dir = _model(tmp_path / "repo", "pbtxt", versions=2)
    target = tmp_path / "served"
    names = materialise(model_dir, [Candidate(1, 0, 1, 1), Candidate(8, 100, 2, 1)], target, None)
    assert sorted(names.values()) == ["add_sub__b1_d0_i1_t1_fp32", "add_sub__b8_d100_i2_t1_fp32"]
    for name in names.values():
        folder = target / name
        assert (folder / "1").is_symlink() and (folder / "2" / "model.onnx").is_file()
        config = read_model_config(folder)
        assert config is not None and config.name == name


def test_int8_quantizer_refuses_a_model_without_weights_and_quantizes_an_mlp(
    tmp_path: Path,
) -> None:
    quantize, note = int8_quantizer()
    assert quantize is not None, note
    add_sub = modelgen.add_sub(tmp_path)
    assert "nothing for INT8 to speed up" in (quantize.refusal(add_sub) or "")
    mlp = modelgen.mlp(tmp_path, features=16, hidden=(16, 16), classes=4)
    assert quantize.refusal(mlp) is None
    target = tmp_path / "int8.onnx"
    quantize(mlp, target)
    ops = {node.op_type for node in onnx.load(str(target)).graph.node}
    assert "DynamicQuantizeLinear" in ops or "MatMulInteger" in ops, ops
    session = ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {"features": np.ones((2, 16), dtype=np.float32)})[:1]
    assert output.shape == (2, 4)


@pytest.mark.parametrize("fmt", ["pbtxt", "yaml"])
def test_current_candidate_reads_the_searched_fields(tmp_path: Path, fmt: str) -> None:
    model_dir = _model(tmp_path, fmt)
    # instance_kind KIND_CPU, no dynamic_batching, no threads parameter: the server's choice
    assert current_candidate(model_dir) == Candidate(8, 0, 1, 0)
    write_best(model_dir, Candidate(4, 250, 2, 3), quantize=None)
    assert current_candidate(model_dir) == Candidate(4, 250, 2, 3)


def test_current_candidate_names_a_bad_threads_parameter(tmp_path: Path) -> None:
    model_dir = _model(tmp_path, "yaml")
    raw, _ = read_raw(model_dir)
    raw["parameters"] = {"intra_op_thread_count": "two"}
    write_config(model_dir, raw, "yaml")
    with pytest.raises(BenchError, match="intra_op_thread_count must be an integer >= 0"):
        current_candidate(model_dir)
