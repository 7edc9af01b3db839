"""Request inputs synthesised from a model's metadata, encoded once before the clock starts.

The bench drives models it knows nothing about, so it reads each input's name, datatype and
shape from ``/v2/models/{m}`` (or gRPC ``ModelMetadata``). The batch dimension (the first
``-1`` of a model whose ``max_batch_size`` is above 0) becomes ``--batch-size``; any other
variable dimension must be given with ``--shape NAME:d0,d1,...`` (the full shape sent,
batch dimension included, unlike perf_analyzer's ``--shape``). Values are random but tame
(floats in [0, 1), small integers, short ASCII strings) so index-like inputs stay in range.

Encodings: HTTP JSON, HTTP binary (Triton's binary tensor extension, outputs asked in
binary) and gRPC ``ModelInferRequest`` with ``raw_input_contents``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from inferplex.datatypes import (
    V2_TO_NUMPY,
    deserialize_bytes,
    element_count,
    serialize_bytes,
)
from inferplex_tools.benchtool import BenchError

Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class TensorPlan:
    """One input as it will be sent."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def parse_shapes(values: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``["INPUT0:1,16", ...]`` -> ``{"INPUT0": (1, 16)}``; BenchError names a bad value."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values:
        name, sep, dims = value.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 0 for d in shape):
            raise BenchError(
                f"--shape: expected NAME:d0,d1,... with non-negative integers, got {value!r}"
            )
        shapes[name] = shape
    return shapes


def plan_inputs(
    metadata: Mapping[str, Any],
    max_batch_size: int,
    batch_size: int,
    shapes: Mapping[str, tuple[int, ...]],
) -> list[TensorPlan]:
    """The inputs to send, from the metadata, the batch size and the ``--shape`` overrides
    (shapes of inputs the model does not have are for other models of the run)."""
    model = metadata.get("name", "?")
    if max_batch_size > 0 and not 1 <= batch_size <= max_batch_size:
        raise BenchError(
            f"--batch-size: model {model} takes batches of 1 to {max_batch_size}, got {batch_size}"
        )
    if max_batch_size == 0 and batch_size != 1:
        raise BenchError(f"--batch-size: model {model} does not batch (max_batch_size 0)")
    plans = []
    for tensor in metadata.get("inputs", []):
        name, datatype = tensor["name"], tensor["datatype"]
        if datatype not in V2_TO_NUMPY:
            raise BenchError(f"model {model} input {name}: unsupported datatype {datatype}")
        if name in shapes:
            shape = shapes[name]
        else:
            dims = [int(d) for d in tensor["shape"]]
            if max_batch_size > 0 and dims and dims[0] == -1:
                dims[0] = batch_size
            if any(d < 0 for d in dims):
                raise BenchError(
                    f"model {model} input {name} has shape {tensor['shape']} with a variable "
                    f"dimension: give its full shape, e.g. --shape {name}:"
                    + ",".join(str(batch_size if d < 0 else d) for d in dims)
                )
            shape = tuple(dims)
        plans.append(TensorPlan(name, datatype, shape))
    return plans


def synthesize(plans: Iterable[TensorPlan], seed: int = 0) -> dict[str, np.ndarray]:
    """Random input arrays for the plans (reproducible with ``seed``)."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    for plan in plans:
        dtype = V2_TO_NUMPY[plan.datatype]
        if plan.datatype == "BYTES":
            count = element_count(plan.shape)
            words = [bytes(rng.integers(97, 123, size=8, dtype=np.uint8)) for _ in range(count)]
            array = np.array(words, dtype=np.object_).reshape(plan.shape)
        elif plan.datatype == "BOOL":
            array = rng.integers(0, 2, size=plan.shape).astype(np.bool_)
        elif dtype.kind in "iu":
            array = rng.integers(0, 10, size=plan.shape).astype(dtype)
        else:
            array = rng.random(size=plan.shape).astype(dtype)
        arrays[plan.name] = array
    return arrays


def _raw(array: np.ndarray, datatype: str) -> bytes:
    if datatype == "BYTES":
        return serialize_bytes(array)
    return np.ascontiguousarray(array).tobytes()


def infer_path(model: str, version: str) -> str:
    return f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"


def http_request(
    host: str,
    model: str,
    version: str,
    plans: Iterable[TensorPlan],
    inputs: Arrays,
    outputs: Iterable[str],
    binary: bool,
) -> bytes:
    """A complete keep-alive HTTP/1.1 inference request (JSON or binary tensor extension)."""
    tensors: list[dict[str, Any]] = []
    raws: list[bytes] = []
    for plan in plans:
        tensor: dict[str, Any] = {
            "name": plan.name,
            "shape": list(plan.shape),
            "datatype": plan.datatype,
        }
        array = inputs[plan.name]
        if binary:
            raw = _raw(array, plan.datatype)
            tensor["parameters"] = {"binary_data_size": len(raw)}
            raws.append(raw)
        elif plan.datatype == "BYTES":
            tensor["data"] = [item.decode() for item in array.reshape(-1)]
        else:
            tensor["data"] = array.reshape(-1).tolist()
        tensors.append(tensor)
    wanted = [
        {"name": name, "parameters": {"binary_data": True}} if binary else {"name": name}
        for name in outputs
    ]
    header = orjson.dumps({"inputs": tensors, "outputs": wanted})
    body = header + b"".join(raws)
    lines = [
        f"POST {infer_path(model, version)} HTTP/1.1",
        f"Host: {host}",
        f"Content-Length: {len(body)}",
    ]
    if binary:
        lines += [
            "Content-Type: application/octet-stream",
            f"Inference-Header-Content-Length: {len(header)}",
        ]
    else:
        lines.append("Content-Type: application/json")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def grpc_request(
    model: str, version: str, plans: Iterable[TensorPlan], inputs: Arrays, outputs: Iterable[str]
) -> bytes:
    """A serialised ``inference.ModelInferRequest`` with raw input contents."""
    from inferplex.protocol.v2 import generated as pb

    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for plan in plans:
        request.inputs.add(name=plan.name, datatype=plan.datatype, shape=plan.shape)
        request.raw_input_contents.append(_raw(inputs[plan.name], plan.datatype))
    for name in outputs:
        request.outputs.add(name=name)
    return bytes(request.SerializeToString())


def header_value(head: bytes, name: bytes) -> bytes | None:
    """The value of a header in a raw HTTP response head (``name`` in lower case)."""
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def decode_http(head: bytes, body: bytes) -> dict[str, tuple[str, np.ndarray]]:
    """Outputs of an HTTP inference response: name -> (datatype, array)."""
    length = header_value(head, b"inference-header-content-length")
    size = int(length) if length is not None else len(body)
    header = orjson.loads(body[:size])
    offset = size
    outputs: dict[str, tuple[str, np.ndarray]] = {}
    for output in header.get("outputs", []):
        datatype, shape = output["datatype"], tuple(output["shape"])
        binary_size = (output.get("parameters") or {}).get("binary_data_size")
        if binary_size is None:
            data = output["data"]
            if datatype == "BYTES":
                array = np.array([str(x).encode() for x in data], dtype=np.object_)
            else:
                array = np.array(data, dtype=V2_TO_NUMPY[datatype])
        else:
            raw = body[offset : offset + binary_size]
            offset += binary_size
            if datatype == "BYTES":
                array = deserialize_bytes(raw, element_count(shape), output["name"])
            else:
                array = np.frombuffer(raw, dtype=V2_TO_NUMPY[datatype])
        outputs[output["name"]] = (datatype, array.reshape(shape))
    return outputs


def decode_grpc(message: bytes) -> dict[str, tuple[str, np.ndarray]]:
    """Outputs of a serialised ``inference.ModelInferResponse``: name -> (datatype, array)."""
    from inferplex.protocol.v2 import generated as pb

    response = pb.ModelInferResponse.FromString(message)
    raws = list(response.raw_output_contents)
    outputs: dict[str, tuple[str, np.ndarray]] = {}
    for index, output in enumerate(response.outputs):
        shape = tuple(int(d) for d in output.shape)
        if index < len(raws):
            if output.datatype == "BYTES":
                array = deserialize_bytes(raws[index], element_count(shape), output.name)
            else:
                array = np.frombuffer(raws[index], dtype=V2_TO_NUMPY[output.datatype])
        else:
            array = _typed_contents(output)
        outputs[output.name] = (output.datatype, array.reshape(shape))
    return outputs


#: V2 datatype -> the ``InferTensorContents`` field holding it (servers without raw contents)
_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _typed_contents(output: Any) -> np.ndarray:
    field = _CONTENTS.get(output.datatype)
    if field is None:
        raise BenchError(f"output {output.name}: {output.datatype} answered without raw contents")
    return np.array(list(getattr(output.contents, field)), dtype=V2_TO_NUMPY[output.datatype])


def check_outputs(
    got: Mapping[str, tuple[str, np.ndarray]], expected: Iterable[Mapping[str, Any]]
) -> None:
    """BenchError unless every output of the metadata came back with its datatype."""
    for tensor in expected:
        name = tensor["name"]
        if name not in got:
            raise BenchError(f"output {name} missing from the answer (got {sorted(got)})")
        datatype = got[name][0]
        if datatype != tensor["datatype"]:
            raise BenchError(
                f"output {name}: datatype {datatype}, the metadata says {tensor['datatype']}"
            )
