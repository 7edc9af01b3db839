"""The Python API on tiny models, in-process (speed thresholds off: tests never depend on
timing)."""

from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex.errors import ConfigError, InvalidInputError, ModelNotFoundError
from inferplex_tools.optimize.api import OptimizeOptions, optimize
from inferplex_tools.optimize.promotion import Thresholds

FAST = {"rounds": 1, "round_s": 0.001, "threads": 1, "batch_size": 4, "clock": "cpu"}
ANY_SPEED = Thresholds(min_speedup=0.0, min_cosine=0.9)


def mlp_repo(tmp_path: Path, config: dict | None = None) -> Path:
    repo = tmp_path / "repo"
    path = modelgen.mlp(repo, features=8, hidden=(16,))
    write_config(repo / "mlp", config or modelgen.model_config(path, max_batch_size=2))
    return repo


def test_graph_variant_is_promoted_and_batch_bounded_by_config(tmp_path: Path) -> None:
    repo = mlp_repo(tmp_path)
    options = OptimizeOptions(int8=False, graph=True, thresholds=ANY_SPEED, **FAST)
    result = optimize(repo, "mlp", options=options)
    assert result.promoted and result.version == 2
    assert result.model_path == repo / "mlp" / "2" / "model.onnx"
    assert result.report.promoted == "fp32+graph"
    assert result.report.batch_sizes == [1, 2]  # max_batch_size 2 bounds --batch-size 4
    assert result.report.evaluation.startswith("synthetic random inputs")
    assert [p.name for p in result.report_paths] == ["optimize_report.json", "optimize_report.md"]


def test_the_parent_is_never_a_version_the_optimiser_wrote(tmp_path: Path) -> None:
    repo = mlp_repo(tmp_path)
    options = OptimizeOptions(int8=False, graph=True, thresholds=ANY_SPEED, **FAST)
    assert optimize(repo, "mlp", options=options).version == 2
    again = optimize(repo, "mlp", options=options)  # by default: version 1, not 2
    assert again.report.parent_version == 1 and again.version == 3
    with pytest.raises(ConfigError, match=r"version 2 was written by inferplex optimize.*parent"):
        optimize(repo, "mlp", 2, options=options)


def test_graph_optimisation_is_measured_beside_each_variant(tmp_path: Path) -> None:
    repo = mlp_repo(tmp_path)
    options = OptimizeOptions(int8=True, method="dynamic", graph=True, thresholds=ANY_SPEED, **FAST)
    names = [c.name for c in optimize(repo, "mlp", options=options).report.candidates]
    assert names == ["int8-dynamic", "int8-dynamic+graph"]


def test_version_policy_that_would_not_serve_it_is_noted(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    path = modelgen.mlp(repo, features=8, hidden=(16,))
    config = modelgen.model_config(path, max_batch_size=2)
    config["version_policy"] = {"specific": {"versions": [1]}}
    write_config(repo / "mlp", config)
    options = OptimizeOptions(thresholds=ANY_SPEED, **FAST)
    result = optimize(repo, "mlp", options=options)
    assert result.version == 2
    assert any("does not serve version 2" in note for note in result.report.notes)


def test_threads_default_to_what_the_server_gives_the_model(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    path = modelgen.mlp(repo, features=8, hidden=(16,))
    config = modelgen.model_config(path, max_batch_size=2)
    config["parameters"] = {"key": "intra_op_thread_count", "value": {"string_value": "3"}}
    write_config(repo / "mlp", config)
    fast = {**FAST, "threads": 0, "clock": "wall"}
    result = optimize(repo, "mlp", options=OptimizeOptions(thresholds=ANY_SPEED, **fast))
    assert result.report.threads == 3
    assert "3 threads" in result.report.to_text()


def test_missing_model_version_and_wrong_platform(tmp_path: Path) -> None:
    repo = mlp_repo(tmp_path)
    with pytest.raises(ModelNotFoundError, match="no model 'other'"):
        optimize(repo, "other")
    with pytest.raises(ModelNotFoundError, match=r"no version 7 \(found \[1\]\)"):
        optimize(repo, "mlp", 7)
    (repo / "torchy" / "1").mkdir(parents=True)
    (repo / "torchy" / "config.pbtxt").write_text('platform: "pytorch_libtorch"\n')
    with pytest.raises(ConfigError, match="only ONNX models can be optimised"):
        optimize(repo, "torchy")


def test_bad_options_and_outputs(tmp_path: Path) -> None:
    repo = mlp_repo(tmp_path)
    with pytest.raises(InvalidInputError, match="nothing to do"):
        optimize(repo, "mlp", options=OptimizeOptions(int8=False))
    with pytest.raises(InvalidInputError, match="clock 'cpu' needs threads 1"):
        optimize(repo, "mlp", options=OptimizeOptions(clock="cpu", threads=2))
    with pytest.raises(InvalidInputError, match=r"threads must be 0 \(as served\) or more"):
        optimize(repo, "mlp", options=OptimizeOptions(threads=-1))
    with pytest.raises(InvalidInputError, match="rounds must be at least 1"):
        optimize(repo, "mlp", options=OptimizeOptions(rounds=0))
    with pytest.raises(InvalidInputError, match=r"output 'nope' .* expected one of \['logits'\]"):
        optimize(repo, "mlp", options=OptimizeOptions(output="nope"))
    np.savez(tmp_path / "eval.npz", wrong=np.zeros((2, 8)))
    with pytest.raises(InvalidInputError, match=r"no array for input\(s\) \['features'\]"):
        optimize(repo, "mlp", options=OptimizeOptions(evaluation=tmp_path / "eval.npz"))
    assert sorted(p.name for p in (repo / "mlp").iterdir()) == ["1", "config.pbtxt"]


def test_fixed_batch_dimension_is_timed_at_that_shape(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelgen.OPSET)])
    model.ir_version = modelgen.IR_VERSION
    (tmp_path / "repo" / "fixed" / "1").mkdir(parents=True)
    onnx_path = tmp_path / "repo" / "fixed" / "1" / "model.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    np.savez(tmp_path / "eval.npz", x=np.ones((5, 4), np.float32))
    options = OptimizeOptions(
        evaluation=tmp_path / "eval.npz",
        thresholds=ANY_SPEED,
        **FAST,  # type: ignore[arg-type]
    )
    result = optimize(tmp_path / "repo", "fixed", options=options)
    assert result.report.batch_sizes == [2]
    assert result.report.candidates[0].accuracy.rows == 4  # 5 rows cut to whole batches of 2
