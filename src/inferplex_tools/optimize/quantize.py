"""INT8 quantisation with ONNX Runtime: the method picked per model, dynamic and static.

Dynamic (weights quantised offline, activations at run time) suits Transformer and other
MatMul-heavy graphs; the embedding table (``Gather`` on a weight) is quantised too. Static (both
quantised offline, activation ranges from a calibration set) suits convolution graphs. Weights
are signed 8-bit per output channel, activations unsigned 8-bit: the combination ONNX Runtime's
integer kernels are fastest with (unsigned weights fall off its VNNI/AMX kernels).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import onnx
from onnx import numpy_helper
from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static

from inferplex.errors import InvalidInputError
from inferplex_tools.optimize.data import CalibrationReader, DataSet
from inferplex_tools.optimize.fp32_layers import keep_shallow_convs_fp32
from inferplex_tools.optimize.graph import optimize_graph

Method = Literal["dynamic", "static"]
StaticFormat = Literal["qoperator", "qdq"]

#: ops whose weights dynamic quantisation turns into integer ops (Gather: embedding tables)
DYNAMIC_OPS = ("MatMul", "Attention", "Gather", "EmbedLayerNormalization", "Conv")
#: metadata key that marks a model as prepared for quantisation
PREPROCESSED_KEY = "onnx.quant.pre_process"
#: ops that carry the weights of a convolution graph
CONV_OPS = frozenset({"Conv", "ConvTranspose"})
#: ops that carry the weights of a MatMul-heavy graph (Transformers, MLPs)
MATMUL_OPS = frozenset({"MatMul", "Gemm", "Attention", "EmbedLayerNormalization"})


@dataclass(frozen=True)
class MethodChoice:
    """The quantisation method for a model and why."""

    method: Method
    reason: str


def weighted_ops(model: onnx.ModelProto) -> Counter[str]:
    """How many nodes of each type take a weight (an initializer) as an input; control-flow
    subgraphs are not searched, as ONNX Runtime's quantiser leaves them alone by default."""
    initializers = {t.name for t in model.graph.initializer}
    return Counter(
        node.op_type
        for node in model.graph.node
        if any(name in initializers for name in node.input)
    )


def choose_method(model: onnx.ModelProto) -> MethodChoice:
    """Static for convolution graphs, dynamic for MatMul-heavy ones; InvalidInputError when
    the graph has nothing INT8 can speed up."""
    ops = weighted_ops(model)
    convs = sum(ops[op] for op in CONV_OPS)
    matmuls = sum(ops[op] for op in MATMUL_OPS)
    if convs:
        return MethodChoice(
            "static",
            f"convolution graph ({convs} Conv with weights, {matmuls} MatMul/Gemm): "
            "static quantisation with calibrated activation ranges",
        )
    if matmuls or ops["Gather"]:
        return MethodChoice(
            "dynamic",
            f"MatMul-heavy graph ({matmuls} MatMul/Gemm/Attention with weights, "
            f"{ops['Gather']} Gather on a table, no Conv): dynamic quantisation",
        )
    raise InvalidInputError(
        "the model has no Conv, MatMul, Gemm or Gather on weights: nothing for INT8 to speed up"
    )


def preprocess(source: Path, target: Path) -> None:
    """The step ONNX Runtime recommends before quantising: the basic graph optimisations
    (constant folding, Conv+BatchNorm folding), then ONNX shape inference so the quantiser
    knows every tensor's type. (ONNX Runtime's ``quant_pre_process`` does the same plus a
    symbolic shape inference that needs sympy and fails on common Transformer exports.)"""
    optimize_graph(source, target, extended=False)
    model = onnx.shape_inference.infer_shapes(onnx.load(str(target)))
    # the mark ONNX Runtime's quantiser looks for (else it logs a warning to pre-process)
    onnx.helper.set_model_props(model, {PREPROCESSED_KEY: "onnxruntime.quant"})
    onnx.save(model, str(target))


def match_annotations(target: Path, parent: onnx.ModelProto) -> int:
    """Drop the shape annotations (``value_info``) of the model at ``target`` that ``parent``
    does not have; returns how many were dropped.

    Pre-processing annotates every tensor for the quantiser. Left in the served file, they let
    ONNX Runtime's load-time fusions fire where they do not for the parent (whose shapes it
    infers itself): in MiniLM, Add + LayerNormalization became SkipLayerNormalization, whose
    CPU kernel measured 5x slower than the pair, costing the INT8 variant 5-9% at batch 32.
    Without them the variant differs from its parent in quantisation only."""
    model = onnx.load(str(target))
    parent_names = {value.name for value in parent.graph.value_info}
    kept = [value for value in model.graph.value_info if value.name in parent_names]
    dropped = len(model.graph.value_info) - len(kept)
    if dropped:
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept)
        onnx.save(model, str(target))
    return dropped


def gemm_to_matmul(model: onnx.ModelProto) -> int:
    """Rewrite each plain Gemm on a weight (torch's Linear on 2-D inputs) as MatMul + Add, in
    place, since ONNX Runtime's dynamic quantiser has no integer Gemm; returns how many."""
    initializers = {t.name: t for t in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in model.graph.node:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        plain = attributes.get("alpha", 1.0) == 1.0 and attributes.get("beta", 1.0) == 1.0
        if (
            node.op_type != "Gemm"
            or node.input[1] not in initializers
            or not plain
            or (attributes.get("transA", 0))
        ):
            nodes.append(node)
            continue
        weight_name = node.input[1]
        if attributes.get("transB", 0):
            weight = numpy_helper.to_array(initializers[weight_name]).T
            weight_name = f"{node.input[1]}_transposed_{rewritten}"
            model.graph.initializer.append(numpy_helper.from_array(weight.copy(), weight_name))
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}_matmul" if has_bias else node.output[0]
        nodes.append(onnx.helper.make_node("MatMul", [node.input[0], weight_name], [product]))
        if has_bias:
            nodes.append(onnx.helper.make_node("Add", [product, node.input[2]], [node.output[0]]))
        rewritten += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return rewritten


def quantize_dynamic_int8(source: Path, target: Path) -> None:
    """Weights to signed 8-bit per channel, embedding tables included; activations at run
    time. Gemm layers are first rewritten as MatMul so that they are quantised too."""
    model = onnx.load(str(source))
    if gemm_to_matmul(model):
        onnx.save(model, str(target))
        source = target  # the quantiser reads the whole file before it writes
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=list(DYNAMIC_OPS),
        # contrib ops (fused Attention, ...) defeat ONNX shape inference: their outputs are FP32
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def quantize_static_int8(
    source: Path,
    target: Path,
    calibration: DataSet,
    fmt: StaticFormat = "qoperator",
    batch_size: int = 16,
) -> list[str]:
    """Activations to unsigned 8-bit with ranges from the calibration set (min/max), weights
    to signed 8-bit per channel; ``fmt`` picks integer operators (QLinearConv, ...) or
    QuantizeLinear/DequantizeLinear pairs that ONNX Runtime fuses at load. Convolutions too
    shallow for the integer kernels stay FP32 (``fp32_layers``): returns the names of the
    nodes left in FP32."""
    model = onnx.load(str(source))
    kept = keep_shallow_convs_fp32(model)
    if kept:
        del model.graph.value_info[:]  # the rewrite made some stale
        onnx.save(onnx.shape_inference.infer_shapes(model), str(target))
        source = target  # the quantiser reads the whole file before it writes
    quantize_static(
        str(source),
        str(target),
        CalibrationReader(calibration, batch_size),
        quant_format=QuantFormat.QOperator if fmt == "qoperator" else QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        nodes_to_exclude=kept,
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return kept
