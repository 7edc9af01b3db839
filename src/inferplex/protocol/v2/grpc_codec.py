"""The V2 gRPC codec: protocol messages <-> core types.

Inference is the hot path: raw tensors become ``np.frombuffer`` views of the message's bytes
and outputs are written to ``raw_output_contents`` (what perf_analyzer and tritonclient
read). Metadata, configuration, statistics and index answers are the engine's dicts in
Triton's JSON shape, which is protobuf's JSON mapping of the same messages, so
``json_format.ParseDict`` renders them; keys the proto does not declare are skipped.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
from google.protobuf import json_format

from inferplex.core.datatypes import (
    V2_TO_NUMPY,
    deserialize_bytes,
    element_count,
    serialize_bytes,
    to_bytes_elements,
)
from inferplex.core.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestedOutput,
    Tensor,
)
from inferplex.errors import InvalidInputError, UnsupportedError
from inferplex.protocol.v2 import generated as pb

#: V2 datatype -> (InferTensorContents field, numpy dtype the field's values decode to).
#: The narrow integer types travel widened to 32 bits; FP16 has no typed field (raw only).
TYPED_CONTENTS: dict[str, tuple[str, np.dtype]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
    "BYTES": ("bytes_contents", np.dtype(np.object_)),
}

_CONTENTS_FIELDS = sorted({field for field, _ in TYPED_CONTENTS.values()})
_SHARED_MEMORY_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# ---- parameters ----


def parameters_from_proto(params: Any) -> Parameters:
    """A map<string, InferParameter> as plain Python values (unset entries become None)."""
    out: Parameters = {}
    for key, param in params.items():
        choice = param.WhichOneof("parameter_choice")
        out[key] = getattr(param, choice) if choice is not None else None
    return out


def fill_parameters(target: Any, params: Parameters) -> None:
    """Write Python values into a map<string, InferParameter>; the oneof member follows the
    value's type (bool before int: bool is an int subclass)."""
    for key, value in params.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if _INT64_MIN <= value <= _INT64_MAX:
                param.int64_param = value
            else:
                param.uint64_param = value
        elif isinstance(value, float):
            param.double_param = value
        elif isinstance(value, bytes):
            param.string_param = value.decode("utf-8", "replace")
        else:
            param.string_param = str(value)


# ---- ModelInferRequest -> InferenceRequest ----


def decode_infer_request(msg: Any) -> InferenceRequest:
    """Turn a ModelInferRequest into an InferenceRequest; InvalidInputError naming the tensor
    and field when the data does not match the declared datatype and shape."""
    # every field read from a message builds a Python object: each is read once
    raw = msg.raw_input_contents
    tensors = msg.inputs
    if raw and len(raw) != len(tensors):
        raise InvalidInputError(
            f"raw_input_contents has {len(raw)} entries but the request declares "
            f"{len(tensors)} inputs; send one entry per input, in the order of 'inputs'"
        )
    inputs: list[Tensor] = []
    for index, tensor in enumerate(tensors):
        name = tensor.name
        datatype = tensor.datatype
        dtype = V2_TO_NUMPY.get(datatype)
        if dtype is None:
            raise InvalidInputError(
                f"input '{name}': unknown datatype '{datatype}', expected one of "
                f"{', '.join(sorted(V2_TO_NUMPY))}"
            )
        shape = tuple(tensor.shape)
        if shape and min(shape) < 0:
            raise InvalidInputError(f"input '{name}': shape {list(shape)} has a negative dimension")
        params: Parameters = {}
        if tensor.parameters:
            params = parameters_from_proto(tensor.parameters)
            _refuse_shared_memory(params, "input", name)
        if raw:
            if tensor.HasField("contents") and tensor.contents.ByteSize():
                raise InvalidInputError(
                    f"input '{name}': has typed 'contents' although the request uses "
                    "raw_input_contents; use one or the other for all inputs"
                )
            data = _decode_raw(raw[index], name, datatype, dtype, shape, index)
        else:
            data = _decode_typed(tensor.contents, name, datatype, shape)
        inputs.append(Tensor(name, datatype, shape, data, params))

    outputs: list[RequestedOutput] = []
    for out in msg.outputs:
        requested = RequestedOutput(out.name)
        if out.parameters:
            requested.parameters = parameters_from_proto(out.parameters)
            _refuse_shared_memory(requested.parameters, "output", requested.name)
        outputs.append(requested)
    parameters = msg.parameters
    return InferenceRequest(
        msg.model_name,
        inputs,
        msg.model_version,
        msg.id,
        outputs,
        parameters_from_proto(parameters) if parameters else {},
    )


def _refuse_shared_memory(params: Parameters, kind: str, name: str) -> None:
    if any(key in params for key in _SHARED_MEMORY_KEYS):
        raise UnsupportedError(
            f"{kind} '{name}': shared-memory tensors are not supported; send the data in "
            "the request (raw_input_contents or contents) instead"
        )


def _decode_raw(
    buffer: bytes, name: str, datatype: str, dtype: np.dtype, shape: tuple[int, ...], index: int
) -> np.ndarray:
    count = prod(shape)
    if datatype == "BYTES":
        return deserialize_bytes(buffer, count, name).reshape(shape)
    expected = count * dtype.itemsize
    if len(buffer) != expected:
        raise InvalidInputError(
            f"input '{name}': raw_input_contents[{index}] holds {len(buffer)} bytes, expected "
            f"{expected} ({count} {datatype} elements of {dtype.itemsize} bytes for shape "
            f"{list(shape)})"
        )
    # A read-only view of the message's bytes: no copy on the hot path.
    return np.ndarray(shape, dtype, buffer)


def _decode_typed(contents: Any, name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype not in TYPED_CONTENTS:
        raise InvalidInputError(
            f"input '{name}': {datatype} data has no typed contents field; send it in "
            "raw_input_contents"
        )
    field, wire_dtype = TYPED_CONTENTS[datatype]
    values = getattr(contents, field)
    count = element_count(shape)
    if len(values) != count:
        raise InvalidInputError(_count_message(contents, name, datatype, shape, field, len(values)))
    if datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = list(values)
        return array.reshape(shape)
    array = np.fromiter(values, dtype=wire_dtype, count=count)
    target = V2_TO_NUMPY[datatype]
    if target != wire_dtype:
        info = np.iinfo(target)
        if count and (array.min() < info.min or array.max() > info.max):
            raise InvalidInputError(
                f"input '{name}': contents.{field} holds values outside the {datatype} range "
                f"[{info.min}, {info.max}]"
            )
        array = array.astype(target)
    return array.reshape(shape)


def _count_message(
    contents: Any, name: str, datatype: str, shape: tuple[int, ...], field: str, got: int
) -> str:
    message = (
        f"input '{name}': expected {element_count(shape)} elements in contents.{field} for "
        f"{datatype} shape {list(shape)}, got {got}"
    )
    others = [f for f in _CONTENTS_FIELDS if f != field and len(getattr(contents, f))]
    if others:
        message += f" (data was sent in {', '.join('contents.' + f for f in others)} instead)"
    return message


# ---- InferenceResponse -> ModelInferResponse ----


def encode_infer_response(response: InferenceResponse) -> Any:
    """Turn an InferenceResponse into a ModelInferResponse with every output's data in
    raw_output_contents (the form perf_analyzer and tritonclient read)."""
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        fill_parameters(msg.parameters, response.parameters)
    raw = msg.raw_output_contents
    for tensor in response.outputs:
        out = msg.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            fill_parameters(out.parameters, tensor.parameters)
        raw.append(tensor_bytes(tensor))
    return msg


def tensor_bytes(tensor: Tensor) -> bytes:
    """A tensor's data in the raw V2 layout (BYTES: length-prefixed elements)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(to_bytes_elements(np.asarray(tensor.data)))
    data = tensor.data
    expected = V2_TO_NUMPY[tensor.datatype]
    dtype = data.dtype
    if dtype is not expected and dtype != expected:
        # a backend may hand back a wider type or another byte order; the wire needs exact
        data = data.astype(expected)
    return data.tobytes()  # C order, whatever the array's strides


# ---- metadata, configuration, statistics, repository index ----


def _parse(data: dict[str, Any], message: Any) -> Any:
    return json_format.ParseDict(data, message, ignore_unknown_fields=True)


def encode_server_metadata(metadata: dict[str, Any]) -> Any:
    """engine.server_metadata() -> ServerMetadataResponse."""
    return _parse(metadata, pb.ServerMetadataResponse())


def encode_model_metadata(metadata: dict[str, Any]) -> Any:
    """engine.model_metadata() -> ModelMetadataResponse."""
    return _parse(metadata, pb.ModelMetadataResponse())


def encode_model_config(triton_config: dict[str, Any]) -> Any:
    """ModelConfig.to_triton_dict() -> ModelConfigResponse (enums such as data_type by name)."""
    response = pb.ModelConfigResponse()
    _parse(triton_config, response.config)
    return response


def encode_model_statistics(stats: list[dict[str, Any]]) -> Any:
    """engine.model_statistics() -> ModelStatisticsResponse."""
    return _parse({"model_stats": stats}, pb.ModelStatisticsResponse())


def encode_repository_index(index: list[dict[str, Any]]) -> Any:
    """engine.repository_index() -> RepositoryIndexResponse."""
    return _parse({"models": index}, pb.RepositoryIndexResponse())
