"""Networks with fixed random weights, as heavy as asked: convolution nets (a classifier, a
cropper) and deep MLPs, for the benchmarks, the examples' camera pipeline and the optimiser."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from examples.modelgen.onnxfile import const, save, value_info


def small_cnn(
    repo: Path,
    name: str = "small_cnn",
    version: int = 1,
    image_size: int = 224,
    widths: Sequence[int] = (32, 64, 160, 160),
    seed: int = 0,
) -> Path:
    """A small image classifier with fixed, seeded random weights.

    ``image`` FP32 ``[-1, 3, image_size, image_size]`` -> ``logits`` FP32 ``[-1, 10]``:
    per width a 3x3 Conv + Relu + 2x2 MaxPool, then GlobalAveragePool, Flatten and Gemm.
    With the defaults one image takes about 10 ms in ONNX Runtime with 2 threads on the
    2-core development machine: heavy enough to be compute-bound when served.
    """
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, channels = "image", 3
    for i, width in enumerate(widths):
        # He initialisation keeps the activations in range through the ReLUs.
        std = np.sqrt(2.0 / (channels * 9))
        initializers += [
            const(f"conv{i}_w", (rng.standard_normal((width, channels, 3, 3)) * std)),
            const(f"conv{i}_b", np.zeros(width)),
        ]
        nodes += [
            helper.make_node(
                "Conv", [current, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
            helper.make_node(
                "MaxPool", [f"relu{i}"], [f"pool{i}"], kernel_shape=[2, 2], strides=[2, 2]
            ),
        ]
        current, channels = f"pool{i}", width
    initializers += [
        const("fc_w", rng.standard_normal((channels, 10)) * np.sqrt(1.0 / channels)),
        const("fc_b", np.zeros(10)),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [current], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["features"]),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [value_info("image", "FP32", ["batch", 3, image_size, image_size])],
        [value_info("logits", "FP32", ["batch", 10])],
        initializers,
    )
    return save(graph, repo, name, version)


def crop_net(
    repo: Path,
    name: str = "crop_net",
    version: int = 1,
    image_size: int = 128,
    crop_size: int = 64,
    widths: Sequence[int] = (16, 16),
    seed: int = 0,
) -> Path:
    """An image-to-image stand-in (e.g. a face detector that hands a face crop on) with fixed,
    seeded random weights.

    ``image`` FP32 ``[-1, 3, image_size, image_size]`` -> ``crop`` FP32
    ``[-1, 3, crop_size, crop_size]``: per width a 3x3 Conv + Relu at full resolution, then a
    MaxPool down to ``crop_size``, a 1x1 Conv back to 3 channels and a Sigmoid (values in
    0..1, like an image). ``image_size`` must be a multiple of ``crop_size``.
    """
    if image_size % crop_size:
        raise ValueError(f"image_size {image_size} is not a multiple of crop_size {crop_size}")
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, channels = "image", 3
    for i, width in enumerate(widths):
        std = np.sqrt(2.0 / (channels * 9))  # He initialisation, as in small_cnn
        initializers += [
            const(f"conv{i}_w", rng.standard_normal((width, channels, 3, 3)) * std),
            const(f"conv{i}_b", np.zeros(width)),
        ]
        nodes += [
            helper.make_node(
                "Conv", [current, f"conv{i}_w", f"conv{i}_b"], [f"conv{i}"], pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"conv{i}"], [f"relu{i}"]),
        ]
        current, channels = f"relu{i}", width
    factor = image_size // crop_size
    initializers += [
        const("out_w", rng.standard_normal((3, channels, 1, 1)) * np.sqrt(1.0 / channels)),
        const("out_b", np.zeros(3)),
    ]
    nodes += [
        helper.make_node(
            "MaxPool", [current], ["pooled"], kernel_shape=[factor] * 2, strides=[factor] * 2
        ),
        helper.make_node("Conv", ["pooled", "out_w", "out_b"], ["projected"]),
        helper.make_node("Sigmoid", ["projected"], ["crop"]),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [value_info("image", "FP32", ["batch", 3, image_size, image_size])],
        [value_info("crop", "FP32", ["batch", 3, crop_size, crop_size])],
        initializers,
    )
    return save(graph, repo, name, version)


def mlp(
    repo: Path,
    name: str = "mlp",
    version: int = 1,
    features: int = 64,
    hidden: Sequence[int] = (64,) * 72,
    classes: int = 10,
    seed: int = 0,
) -> Path:
    """A multi-layer perceptron with fixed, seeded random weights.

    ``features`` FP32 ``[-1, features]`` -> ``logits`` FP32 ``[-1, classes]``: one Gemm + Relu
    per ``hidden`` width, then a Gemm to ``classes``. The defaults (72 hidden layers of 64) are
    deep and narrow on purpose: at batch 1 each layer costs about a microsecond of kernel
    dispatch, which a batch shares, so one row takes about 0.1 ms in ONNX Runtime (one thread,
    2-core development machine) and a row in a batch of 32 about 9x less: the model of
    ``bench/batching.py``, where dynamic batching pays.
    """
    rng = np.random.default_rng(seed)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current, width = "features", features
    for i, out in enumerate([*hidden, classes]):
        # He initialisation keeps the activations in range through the ReLUs.
        initializers += [
            const(f"fc{i}_w", rng.standard_normal((width, out)) * np.sqrt(2.0 / width)),
            const(f"fc{i}_b", rng.standard_normal(out) * 0.1),
        ]
        last = i == len(hidden)
        gemm = "logits" if last else f"fc{i}"
        nodes.append(helper.make_node("Gemm", [current, f"fc{i}_w", f"fc{i}_b"], [gemm]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm], [f"relu{i}"]))
            current = f"relu{i}"
        width = out
    graph = helper.make_graph(
        nodes,
        name,
        [value_info("features", "FP32", ["batch", features])],
        [value_info("logits", "FP32", ["batch", classes])],
        initializers,
    )
    return save(graph, repo, name, version)
