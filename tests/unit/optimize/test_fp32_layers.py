from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from examples import modelgen
from inferplex_tools.optimize.fp32_layers import keep_shallow_convs_fp32


def two_conv_model() -> onnx.ModelProto:
    """A one-channel image: a 3x3 Conv of 9 terms per output, then one of 36."""
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "w0"], ["c0"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c0"], ["r0"]),
            helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Conv", ["p0", "w1"], ["c1"], name="deep", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["out"], name="deep_relu"),
        ],
        "two_conv",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["n", 1, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 4, 4, 4])],
        [
            numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w0"),
            numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", modelgen.OPSET)])
    model.ir_version = modelgen.IR_VERSION
    return model


def run(model: onnx.ModelProto, image: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": image})[0]


def test_shallow_conv_block_is_kept_with_relu_after_the_pooling() -> None:
    model = two_conv_model()
    image = np.random.default_rng(1).standard_normal((2, 1, 8, 8)).astype(np.float32)
    before = run(model, image)
    kept = keep_shallow_convs_fp32(model)
    assert [n.op_type for n in model.graph.node] == ["Conv", "MaxPool", "Relu", "Conv", "Relu"]
    assert sorted(kept) == sorted(n.name for n in model.graph.node[:3])
    assert "deep" not in kept and len(set(kept)) == 3
    onnx.checker.check_model(model)
    np.testing.assert_allclose(run(model, image), before, rtol=1e-6)


def test_deep_convolutions_are_all_quantised(tmp_path: Path) -> None:
    model = onnx.load(str(modelgen.small_cnn(tmp_path, image_size=16, widths=(4, 8))))
    assert keep_shallow_convs_fp32(model) == []  # 3 channels x 3x3 = 27 terms per output
