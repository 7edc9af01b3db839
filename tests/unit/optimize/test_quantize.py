from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from inferplex import modelgen
from inferplex.errors import InvalidInputError
from inferplex.optimize.quantize import choose_method, weighted_ops


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
