from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from examples import modelgen
from inferplex.errors import InvalidInputError
from inferplex_tools.optimize.quantize import (
    choose_method,
    gemm_to_matmul,
    match_annotations,
    preprocess,
    weighted_ops,
)


def test_convolution_graph_gets_static(tmp_path: Path) -> None:
    model = onnx.load(str(modelgen.small_cnn(tmp_path, image_size=16, widths=(4,))))
    assert weighted_ops(model)["Conv"] == 1
    choice = choose_method(model)
    assert choice.method == "static"
    assert "1 Conv" in choice.reason


def test_matmul_graph_gets_dynamic(tmp_path: Path) -> None:
    model = onnx.load(str(modelgen.mlp(tmp_path, hidden=(8, 8))))
    choice = choose_method(model)
    assert choice.method == "dynamic"
    assert "3 MatMul/Gemm" in choice.reason


def test_embedding_table_alone_gets_dynamic() -> None:
    table = numpy_helper.from_array(np.zeros((10, 4), dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"])],
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4])],
        [table],
    )
    assert choose_method(helper.make_model(graph)).method == "dynamic"


def test_graph_without_weights_is_a_clear_error(tmp_path: Path) -> None:
    model = onnx.load(str(modelgen.add_sub(tmp_path)))
    with pytest.raises(InvalidInputError, match="nothing for INT8 to speed up"):
        choose_method(model)


def test_annotations_of_the_preprocessing_are_dropped(tmp_path: Path) -> None:
    parent_path = modelgen.small_cnn(tmp_path, image_size=16, widths=(4, 8))
    prepared = tmp_path / "prepared.onnx"
    preprocess(parent_path, prepared)
    annotations = list(onnx.load(str(prepared)).graph.value_info)
    assert len(annotations) > 1
    parent = onnx.load(str(parent_path))
    parent.graph.value_info.append(annotations[0])  # one the parent has too: kept
    assert match_annotations(prepared, parent) == len(annotations) - 1
    assert list(onnx.load(str(prepared)).graph.value_info) == annotations[:1]
    assert match_annotations(prepared, parent) == 0


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_is_rewritten_as_matmul_with_the_same_result(tmp_path: Path, trans_b: int) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 4) if trans_b else (4, 6)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=trans_b),
            helper.make_node("Relu", ["h"], ["y"]),
        ],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])],
        [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(np.ones(6, np.float32), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelgen.OPSET)])
    model.ir_version = modelgen.IR_VERSION
    x = rng.standard_normal((3, 4)).astype(np.float32)
    before = _run(model, x)
    assert gemm_to_matmul(model) == 1
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Add", "Relu"]
    onnx.checker.check_model(model)
    np.testing.assert_allclose(_run(model, x), before, rtol=1e-5)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]
