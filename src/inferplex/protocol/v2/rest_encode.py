"""The V2 REST codec's answers: an :class:`InferenceResponse` as one body, JSON or with
Triton's binary tensor data extension (``rest.py`` decodes the requests).

Outputs go binary when the request asked for it (the output's ``binary_data``, else the
request's ``binary_data_output``); an output the request directed to a shared-memory region
is written there and sent without data. A float output with a non-finite value is written
by ``json`` (NaN / Infinity / -Infinity, as Triton writes them; orjson would write null);
a large output's JSON is written a chunk at a time (``rest_json.json_pieces``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson

from inferplex.dataplane.checks import shared_output
from inferplex.datatypes import CHUNK, V2_TO_NUMPY, serialize_bytes
from inferplex.protocol.v2.rest_json import JsonPieces, json_pieces, spliced, strings_to_json
from inferplex.shm.registry import REGION, Regions
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

__all__ = ["encode_infer_response"]

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def encode_infer_response(
    response: InferenceResponse,
    request: InferenceRequest,
    shm: Regions | None = None,
) -> tuple[bytes, int | None]:
    """Encode a response as one body; returns it and the JSON header length.

    The header length is None for a pure JSON body. Outputs go binary when the request asked
    for it (the output's ``binary_data``, else the request's ``binary_data_output``); an output
    the request directed to a shared-memory region is written there and sent without data or
    parameters.
    """
    binary_default = request.parameters.get("binary_data_output", False)
    requested = {out.name: out.parameters for out in request.outputs} if request.outputs else None
    outputs: list[dict[str, Any]] = []
    chunks: list[Any] = []
    large: list[JsonPieces] = []  # large outputs' JSON text, spliced into the header
    for tensor in response.outputs:
        parameters = requested.get(tensor.name) if requested else None
        if parameters and REGION in parameters:
            shared_output(shm, tensor.name, parameters, tensor.datatype, tensor.data)
            # no 'parameters', as Triton answers: its C++ client (perf_analyzer) reads an
            # output that has any as binary data and fails without binary_data_size
            outputs.append(
                {"name": tensor.name, "datatype": tensor.datatype, "shape": tensor.shape}
            )
            continue
        binary = parameters.get("binary_data", binary_default) if parameters else binary_default
        # a shape tuple is written as a JSON array (numpy integers too, with _DUMPS_OPTIONS)
        if binary:
            chunk, nbytes = _binary_output(tensor)
            chunks.append(chunk)
            outputs.append(
                {
                    "name": tensor.name,
                    "datatype": tensor.datatype,
                    "shape": tensor.shape,
                    "parameters": {"binary_data_size": nbytes},
                }
            )
        else:
            data = _json_output(tensor)
            if type(data) is JsonPieces:
                large.append(data)
                data = JsonPieces.PLACEHOLDER
            outputs.append(
                {
                    "name": tensor.name,
                    "datatype": tensor.datatype,
                    "shape": tensor.shape,
                    "data": data,
                }
            )

    body: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    if response.id:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    header = orjson.dumps(body, option=_DUMPS_OPTIONS)
    if large:
        header = spliced(header, large)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _native(tensor: Tensor) -> np.ndarray:
    """The output's data as a C-contiguous array of its declared datatype (no copy when it
    already is one)."""
    expected = V2_TO_NUMPY[tensor.datatype]
    data = tensor.data
    dtype = data.dtype
    if dtype is not expected and dtype != expected:
        # a backend may hand back a wider type or another byte order; the wire needs exact
        data = data.astype(expected)
    return np.ascontiguousarray(data)


def _binary_output(tensor: Tensor) -> tuple[bytes | np.ndarray, int]:
    """The output's raw bytes (an array is joined into the body without a copy of its own)."""
    if tensor.datatype == "BYTES":
        raw = serialize_bytes(np.asarray(tensor.data))
        return raw, len(raw)
    array = _native(tensor)  # joined into the body as is, whatever its shape
    return array, array.nbytes


def _json_output(tensor: Tensor) -> Any:
    """The output's 'data': a list or array orjson writes, or for a large output its JSON
    text in pieces written a chunk at a time (each orjson call holds the GIL: see
    element_chunks; ``json_pieces``)."""
    if tensor.datatype == "BYTES":
        array = np.asarray(tensor.data)
        if array.size <= CHUNK:
            return strings_to_json(tensor.name, array)
        return json_pieces(
            orjson.dumps(strings_to_json(tensor.name, chunk))
            for chunk in _array_chunks(array.reshape(-1))
        )
    data = _native(tensor).reshape(-1)
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        # orjson would write null; NaN / Infinity / -Infinity as Triton writes them
        return json_pieces(
            json.dumps(chunk.tolist(), separators=(",", ":")).encode()
            for chunk in _array_chunks(data)
        )
    if data.size <= CHUNK:
        return data
    return json_pieces(orjson.dumps(chunk, option=_DUMPS_OPTIONS) for chunk in _array_chunks(data))


def _array_chunks(data: np.ndarray) -> Iterator[np.ndarray]:
    for low in range(0, data.size, CHUNK):
        yield data[low : low + CHUNK]
