"""The layers static INT8 leaves in FP32: convolutions too shallow for integer kernels.

A convolution computes each output value as a dot product of ``input channels per group x
kernel height x kernel width`` terms. ONNX Runtime's integer kernels work on blocks of such
terms; with very few (the first 3x3 convolution of a one-channel image: 9) they do more work
than the FP32 kernel. Measured on the digits CNN at batch 32: 0.98 ms for that QLinearConv
against 0.32 ms in FP32, and 1.19 ms with two threads, where the FP32 one halves; with it and
its ReLU and max-pooling left in FP32 the INT8 variant went from 2.43 to 1.78 ms (two
threads, ONNX Runtime's profile).

A ReLU followed by a max-pooling in such a block is rewritten as the max-pooling followed by
the ReLU (the same values: both are monotone, and pooling ignores its padding), so the block
ends in a ReLU. Else ONNX Runtime moves the QuantizeLinear after the block ahead of the
max-pooling at load, and the pooling runs on 8-bit values in a layout whose kernel took 2.1 ms
where the FP32 one takes 0.23 ms.
"""

from __future__ import annotations

import math

import onnx

#: a Conv on a weight with fewer terms per output value than this stays in FP32
MIN_INT8_CONV_TERMS = 16
#: why, as the optimiser's report says it
SHALLOW_CONVS = (
    f"convolutions with fewer than {MIN_INT8_CONV_TERMS} terms per output value, and the ReLU"
    " and max-pooling right after them: faster in FP32"
)
#: ops that may follow a shallow Conv in its FP32 block
_BLOCK_OPS = ("Relu", "MaxPool")


def keep_shallow_convs_fp32(model: onnx.ModelProto) -> list[str]:
    """The names of the nodes to leave in FP32 (each shallow Conv, with the ReLU and
    max-pooling that directly follow it), naming unnamed ones; a ReLU + max-pooling pair in
    such a block is swapped, in place (shape annotations of the tensors in between are then
    stale: infer them again)."""
    weights = {t.name: t for t in model.graph.initializer}
    consumers = _consumers(model.graph)
    kept: list[str] = []
    for index, node in enumerate(model.graph.node):
        if not _is_shallow_conv(node, weights):
            continue
        block = _fp32_block(node, consumers)
        if [n.op_type for n in block[1:]] == ["Relu", "MaxPool"]:
            _swap(block[1], block[2])
        for offset, member in enumerate(block):
            member.name = member.name or f"fp32_block_{index}_{offset}"
            kept.append(member.name)
    return kept


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """The nodes that read each tensor, by the tensor's name."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return consumers


def _is_shallow_conv(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> bool:
    """A Conv on a known weight with fewer than MIN_INT8_CONV_TERMS terms per output value."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in weights:
        return False
    return math.prod(weights[node.input[1]].dims[1:]) < MIN_INT8_CONV_TERMS


def _fp32_block(
    conv: onnx.NodeProto, consumers: dict[str, list[onnx.NodeProto]]
) -> list[onnx.NodeProto]:
    """``conv`` and the ReLU and max-pooling that directly follow it, each the only reader
    of the one before."""
    block = [conv]
    while len(block) <= len(_BLOCK_OPS):
        followers = consumers.get(block[-1].output[0], [])
        if len(followers) != 1 or followers[0].op_type not in _BLOCK_OPS:
            break
        if len(followers[0].output) != 1 or followers[0] in block:
            break
        block.append(followers[0])
    return block


def _swap(relu: onnx.NodeProto, pool: onnx.NodeProto) -> None:
    """x -> Relu -> MaxPool -> y becomes x -> MaxPool -> Relu -> y; the first of the two
    slots in the node list gets the pooling, so the list stays in topological order."""
    source, result = relu.input[0], pool.output[0]
    between = f"{result}_before_relu"
    first, second = onnx.NodeProto(), onnx.NodeProto()
    first.CopyFrom(pool)
    first.input[0], first.output[0] = source, between
    second.CopyFrom(relu)
    second.input[0], second.output[0] = between, result
    relu.CopyFrom(first)
    pool.CopyFrom(second)
