"""What every builder shares: the ONNX versions, the datatype table and writing a model file
(``<repo>/<name>/<version>/model.onnx``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

#: ONNX opset and IR version of every model here: old enough for onnxruntime >= 1.17.
OPSET = 17
IR_VERSION = 8
MODEL_FILENAME = "model.onnx"
PLATFORM = "onnxruntime_onnx"

#: V2 datatype -> ONNX element type (BYTES is ONNX's string tensor).
V2_TO_ONNX: dict[str, int] = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}
ONNX_TO_V2: dict[int, str] = {v: k for k, v in V2_TO_ONNX.items()}

Dims = Sequence[int | str]


def value_info(name: str, datatype: str, shape: Dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, V2_TO_ONNX[datatype], list(shape))


def const(name: str, array: np.ndarray) -> onnx.TensorProto:
    """An initializer; float64 arrays (numpy's default) are stored as FP32."""
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    return numpy_helper.from_array(array, name)


def save(graph: onnx.GraphProto, repo: Path, name: str, version: int) -> Path:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="examples.modelgen",
    )
    onnx.checker.check_model(model, full_check=True)
    path = Path(repo) / name / str(version) / MODEL_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def session(path: Path, threads: int = 1) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def timed(function: Any, *args: Any) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start
