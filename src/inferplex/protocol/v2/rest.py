"""The V2 REST codec: JSON bodies and Triton's binary tensor data extension <-> core types.

Request bodies are either pure JSON or, with the binary extension, a JSON header of
``Inference-Header-Content-Length`` bytes followed by the raw data of every input whose
``parameters.binary_data_size`` is set, in input order. Binary inputs become read-only numpy
views of the body (no copy); BYTES elements use the 4-byte little-endian length prefix layout.
Checks against the model's declared inputs (names, duplicates, shapes) are the engine's;
the checks every protocol makes of a decoded tensor, shared memory and the output parameters
the server acts on are the data plane's (``dataplane/checks.py``), called from here where
the codec meets each tensor.

Every problem with a request is an :class:`InvalidInputError` whose message names the tensor
or field and says what was expected.

Non-finite floats (NaN, +/-Inf) are JSON's one gap: as Triton does (and Python's ``json``,
which tritonclient uses), they are read and written as the literals ``NaN``, ``Infinity`` and
``-Infinity``. orjson knows neither, so a request it cannot parse is tried once more with
``json`` when it holds such a literal, and a float output with a non-finite value is written
by ``json``; everything else stays on orjson's path.
"""

from __future__ import annotations

import json
from math import prod
from typing import Any

import numpy as np
import orjson

from inferplex.dataplane.checks import (
    CheckFactory,
    InputCheck,
    input_dtype,
    negative_dims,
    raw_size_error,
    requested_output,
    shared_input,
)
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.datatypes import (
    V2_TO_NUMPY,
    deserialize_bytes,
    reshape_input,
    view_input,
)
from inferplex.errors import InferplexError, InvalidInputError
from inferplex.protocol.v2.layouts import LayoutCache
from inferplex.protocol.v2.rest_json import (
    GC_PAUSE_BYTES,
    array_from_json,
    gc_paused,
    json_type,
    parameters_object,
    release,
)
from inferplex.security.charges import BYTES_ELEMENT_COST, JSON_TREE_FACTOR, charge
from inferplex.shm.registry import REGION, Regions
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

__all__ = [
    "decode_body",
    "decode_infer_request",
    "gc_paused",
    "parse_header_length",
]

_DUMPS_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def parse_header_length(value: bytes | str) -> int:
    """The integer value of an ``Inference-Header-Content-Length`` header."""
    try:
        length = int(value)
    except ValueError:
        shown = value.decode(errors="replace") if isinstance(value, bytes) else value
        raise InvalidInputError(
            f"header Inference-Header-Content-Length must be a non-negative integer, got '{shown}'"
        ) from None
    if length < 0:
        raise InvalidInputError(
            f"header Inference-Header-Content-Length must be a non-negative integer, got {length}"
        )
    return length


def decode_infer_request(
    body: bytes | bytearray | memoryview,
    header_length: int | None,
    model_name: str,
    model_version: str = "",
    shm: Regions | None = None,
    checks: CheckFactory | None = None,
) -> InferenceRequest:
    """Decode a V2 REST inference request body into an :class:`InferenceRequest`.

    ``header_length`` is the ``Inference-Header-Content-Length`` value, or None when the
    header is absent (the whole body is JSON). The model name and version come from the URL.
    Tensors that name a shared-memory region are read from / checked against ``shm``.
    ``checks`` gives what runs on each input's declared name, datatype and shape before its
    data is decoded (limits, the model's inputs).
    """
    json_size = len(body) if header_length is None else min(header_length, len(body))
    if json_size < GC_PAUSE_BYTES:
        return decode_body(body, header_length, model_name, model_version, shm, checks)
    # the parsed JSON of a large body lives through the whole decode (see rest_json.gc_paused)
    with gc_paused():
        return decode_body(body, header_length, model_name, model_version, shm, checks)


def decode_body(
    body: bytes | bytearray | memoryview,
    header_length: int | None,
    model_name: str,
    model_version: str = "",
    shm: Regions | None = None,
    checks: CheckFactory | None = None,
) -> InferenceRequest:
    """:func:`decode_infer_request` without pausing the garbage collector: for a body whose
    JSON is smaller than ``GC_PAUSE_BYTES`` (the hot path: one call less)."""
    check = None if checks is None else checks(model_name, model_version)
    # a large body is read in place, into a writable buffer: its tensors must stay read-only
    data = body if isinstance(body, bytes) else memoryview(body).toreadonly()
    size = len(data)
    key = None  # the header's bytes, for the layout cache
    if header_length is None or header_length == size:
        header_length = size
        text: bytes | memoryview = data
    elif header_length < size:
        if header_length <= _LAYOUT_MAX_BYTES:
            key = bytes(data[:header_length])
            layout = _LAYOUTS.get(key)
            if layout is not None:
                return layout.request(data, model_name, model_version, check)
        text = memoryview(data)[:header_length]
    else:
        raise InvalidInputError(
            f"header Inference-Header-Content-Length is {header_length} but the body has only "
            f"{size} bytes"
        )
    header = _parse_header(text)
    del text  # the JSON text of a large body is not needed once parsed
    request_id, parameters = _request_fields(header)
    inputs = _decode_inputs(header.get("inputs"), data, header_length, shm, check)
    raw_outputs = header.get("outputs")
    outputs = [] if raw_outputs is None else _decode_outputs(raw_outputs, shm)
    request = InferenceRequest(model_name, inputs, model_version, request_id, outputs, parameters)
    if key is not None and all("binary_data_size" in t.parameters for t in inputs):
        _LAYOUTS.keep(key, _BinaryLayout(request, header_length))
    return request


def _parse_header(text: bytes | memoryview) -> dict[str, Any]:
    """The JSON object of a request's header (the whole body when it has no binary data)."""
    # its Python objects can be many times its text: charged before they are made
    charge(len(text) * JSON_TREE_FACTOR, "the request's JSON of %d bytes", len(text))
    try:
        header = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        header = _with_non_finite_literals(text, exc)
    # orjson builds exact dicts, lists and strs: ``type(...) is`` checks are enough and cheap
    if type(header) is not dict:
        raise InvalidInputError(
            f"the inference request must be a JSON object, got {json_type(header)}"
        )
    return header


def _request_fields(header: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The request's 'id' and 'parameters'."""
    request_id = header.get("id", "")
    if type(request_id) is not str:
        raise InvalidInputError(f"'id' must be a string, got {json_type(request_id)}")
    parameters = parameters_object(header.get("parameters"), "request", "")
    if parameters:
        binary_output = parameters.get("binary_data_output", False)
        if type(binary_output) is not bool:
            raise InvalidInputError(
                "request parameter 'binary_data_output' must be true or false, got "
                f"{json_type(binary_output)}"
            )
    return request_id, parameters


def _decode_inputs(
    raw_inputs: Any,
    data: bytes | memoryview,
    header_length: int,
    shm: Regions | None,
    check: InputCheck | None,
) -> list[Tensor]:
    """The input tensors; every byte after the header must belong to one of them."""
    if type(raw_inputs) is not list:
        raise InvalidInputError(
            f"'inputs' must be a list of input tensors, got {json_type(raw_inputs)}"
        )
    # duplicate names, like every check against the model's declared inputs, are the engine's
    inputs: list[Tensor] = []
    offset = header_length
    size = len(data)
    try:
        for index, raw in enumerate(raw_inputs):
            tensor, offset = _decode_input(raw, index, data, offset, size, shm, check)
            inputs.append(tensor)
    except InferplexError:
        for raw in raw_inputs:  # a refused body's JSON values, freed a chunk at a time
            if type(raw) is dict and type(raw.get("data")) is list:
                release(raw.pop("data"))
        raise
    _check_claimed(offset, size)
    return inputs


class _BinaryLayout:
    """A valid JSON header whose inputs are all binary: everything of a request but the bytes
    of its tensors. Requests built from it share its parameter dicts and requested outputs
    (nothing downstream writes to a request)."""

    __slots__ = ("header_length", "id", "inputs", "outputs", "parameters")

    def __init__(self, request: InferenceRequest, header_length: int) -> None:
        self.header_length = header_length
        self.id = request.id
        self.parameters = request.parameters
        self.outputs = request.outputs
        self.inputs = [
            (
                t.name,
                t.datatype,
                None if t.datatype == "BYTES" else V2_TO_NUMPY[t.datatype],
                t.shape,
                t.parameters,
                t.parameters["binary_data_size"],
            )
            for t in request.inputs
        ]

    def request(
        self,
        body: bytes | memoryview,
        model_name: str,
        model_version: str,
        check: InputCheck | None = None,
    ) -> InferenceRequest:
        """The request with this header and ``body``: only the checks that depend on the
        body's size (and ``check``) run again, in the order a full decode runs them."""
        size = len(body)
        offset = self.header_length
        inputs: list[Tensor] = []
        for name, datatype, dtype, shape, parameters, binary_size in self.inputs:
            if check is not None:
                check(name, datatype, shape)
            end = offset + binary_size
            if end > size:
                _binary_end(name, binary_size, offset, size)  # raises
            if dtype is None:
                array = _binary_array(body, offset, end, name, datatype, shape)
            else:  # the shape fitted this dtype when the header was first decoded
                array = np.ndarray(shape, dtype, body, offset)
            inputs.append(Tensor(name, datatype, shape, array, parameters))
            offset = end
        _check_claimed(offset, size)
        return InferenceRequest(
            model_name, inputs, model_version, self.id, self.outputs, self.parameters
        )


#: Decoded headers of binary requests by their bytes: a client sends the same JSON header with
#: every request of a shape (perf_analyzer, tritonclient), so it is parsed and checked once.
#: Bounded; the oldest entry goes first.
_LAYOUTS: LayoutCache[bytes, _BinaryLayout] = LayoutCache(256)
_LAYOUT_MAX_BYTES = 16384


#: where a binary input's data is, in error messages
_BINARY_DATA = "its binary data (parameters.binary_data_size)"


def _check_claimed(offset: int, size: int) -> None:
    """Every byte after the JSON header belongs to an input."""
    if offset != size:
        raise InvalidInputError(
            f"the body has {size - offset} bytes of binary data after the JSON header that no "
            "input claims: the inputs' parameters.binary_data_size must add up to the body size "
            "minus Inference-Header-Content-Length"
        )


def _binary_end(name: str, binary_size: int, offset: int, size: int) -> int:
    """Where an input's binary data ends; it must lie within the body."""
    end = offset + binary_size
    if end > size:
        raise InvalidInputError(
            f"input '{name}': parameters.binary_data_size is {binary_size} but only "
            f"{size - offset} bytes of binary data remain in the body (is "
            "Inference-Header-Content-Length set to the JSON header's size?)"
        )
    return end


def _binary_array(
    body: bytes | memoryview,
    offset: int,
    end: int,
    name: str,
    datatype: str,
    shape: tuple[int, ...],
) -> np.ndarray:
    """The tensor in ``body[offset:end]``, whose size was checked against shape and datatype."""
    if datatype == "BYTES":
        count = prod(shape)
        # one Python object per element, and a copy of their bytes: charged before they are cut
        charge(
            count * BYTES_ELEMENT_COST + end - offset, "input '%s': %d BYTES elements", name, count
        )
        array = deserialize_bytes(memoryview(body)[offset:end], count, name)
        return reshape_input(array, shape, name)
    # a read-only view into the body, like np.frombuffer, built in one call
    return view_input(body, V2_TO_NUMPY[datatype], shape, name, offset)


def _decode_input(
    raw: Any,
    index: int,
    body: bytes | memoryview,
    offset: int,
    size: int,
    shm: Regions | None,
    check: InputCheck | None = None,
) -> tuple[Tensor, int]:
    """One input tensor; returns it and the offset just past its binary data."""
    if type(raw) is not dict:
        raise InvalidInputError(f"inputs[{index}] must be a JSON object, got {json_type(raw)}")
    name = raw.get("name")
    if type(name) is not str or not name:
        raise InvalidInputError(f"inputs[{index}]: 'name' must be a non-empty string")
    datatype = raw.get("datatype", "")
    dtype = input_dtype(name, datatype)
    shape = _shape(raw.get("shape"), name)
    if check is not None:
        check(name, datatype, shape)
    count = prod(shape)
    parameters = raw.get("parameters")
    if parameters is None:
        parameters = {}
    else:
        parameters_object(parameters, "input", name)  # raises unless a shallow object
    data = raw.get("data")
    if REGION in parameters:
        return _shared_input(name, datatype, shape, parameters, data, shm), offset
    binary_size = parameters.get("binary_data_size")

    if binary_size is None:
        if data is None:
            raise InvalidInputError(
                f"input '{name}' has no data: give 'data' or parameters.binary_data_size"
            )
        # the JSON values are given up as they are converted (a large input's list of Python
        # objects is most of the memory a JSON body costs): drop every other reference first
        del data
        # numpy's array of the values (8 bytes each), then one of the datatype (or objects)
        cost = BYTES_ELEMENT_COST if datatype == "BYTES" else 8 + dtype.itemsize
        charge(count * cost, "input '%s': %d elements from JSON", name, count)
        array = array_from_json(raw.pop("data"), datatype, dtype, shape, count, name)
        return Tensor(name, datatype, shape, array, parameters), offset

    if data is not None:
        raise InvalidInputError(
            f"input '{name}' has both 'data' and parameters.binary_data_size; give one"
        )
    end = _binary_input_end(
        name, datatype, shape, count * dtype.itemsize, binary_size, offset, size
    )
    array = _binary_array(body, offset, end, name, datatype, shape)
    return Tensor(name, datatype, shape, array, parameters), end


def _shared_input(
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    parameters: dict[str, Any],
    data: Any,
    shm: Regions | None,
) -> Tensor:
    """An input whose parameters name a shared-memory region (and that has no data)."""
    if data is not None or "binary_data_size" in parameters:
        raise InvalidInputError(
            f"input '{name}' has parameters.{REGION} and also 'data' or "
            "parameters.binary_data_size; give one"
        )
    array = shared_input(shm, name, parameters, datatype, shape)
    return Tensor(name, datatype, shape, array, parameters)


def _binary_input_end(
    name: str,
    datatype: str,
    shape: tuple[int, ...],
    nbytes: int,
    binary_size: Any,
    offset: int,
    size: int,
) -> int:
    """Where a binary input's data ends: its binary_data_size a non-negative integer, within
    the body, and (a fixed-size datatype) ``nbytes``, the size its shape needs."""
    if type(binary_size) is not int or binary_size < 0:
        raise InvalidInputError(
            f"input '{name}': parameters.binary_data_size must be a non-negative integer, got "
            f"{binary_size!r}"
        )
    end = _binary_end(name, binary_size, offset, size)
    if datatype != "BYTES" and binary_size != nbytes:
        raise raw_size_error(name, _BINARY_DATA, binary_size, datatype, shape)
    return end


def _decode_outputs(raw_outputs: Any, shm: Regions | None) -> list[RequestedOutput]:
    if type(raw_outputs) is not list:
        raise InvalidInputError(
            f"'outputs' must be a list of requested outputs, got {json_type(raw_outputs)}"
        )
    outputs: list[RequestedOutput] = []
    classified = False
    for index, raw in enumerate(raw_outputs):
        if type(raw) is not dict:
            raise InvalidInputError(f"outputs[{index}] must be a JSON object, got {json_type(raw)}")
        name = raw.get("name")
        if type(name) is not str or not name:
            raise InvalidInputError(f"outputs[{index}]: 'name' must be a non-empty string")
        parameters = raw.get("parameters")
        if parameters is None:
            parameters = {}
        elif _check_output_parameters(parameters, name, shm):
            classified = True
        outputs.append(RequestedOutput(name, parameters))
    return ClassifiedOutputs(outputs) if classified else outputs


def _check_output_parameters(raw: Any, name: str, shm: Regions | None) -> int:
    """An output's 'parameters': a shallow object whose binary_data is a bool; then the
    data plane's checks (shared memory, classification: returns how many classes)."""
    parameters = parameters_object(raw, "output", name)
    binary = parameters.get("binary_data", False)
    if not isinstance(binary, bool):
        raise InvalidInputError(
            f"output '{name}': parameters.binary_data must be true or false, got "
            f"{json_type(binary)}"
        )
    return requested_output(name, parameters, shm)


def _shape(raw: Any, name: str) -> tuple[int, ...]:
    if type(raw) is not list:
        raise InvalidInputError(
            f"input '{name}': 'shape' must be a list of non-negative integers, got {json_type(raw)}"
        )
    for dim in raw:
        # bool is an int subclass: reject it explicitly, as JSON true is not a dimension
        if type(dim) is not int or dim < 0:
            if all(type(d) is int for d in raw):
                raise negative_dims(name, raw)
            raise InvalidInputError(
                f"input '{name}': 'shape' must be a list of non-negative integers, got {raw}"
            )
    return tuple(raw)


def _with_non_finite_literals(text: bytes | memoryview, error: orjson.JSONDecodeError) -> Any:
    """A request header orjson refused, parsed by ``json`` if it holds the NaN / Infinity
    literals orjson does not know; the InvalidInputError for ``error`` otherwise."""
    raw = bytes(text)
    if b"NaN" in raw or b"Infinity" in raw:
        try:
            return json.loads(raw)
        except ValueError:
            pass
        except RecursionError:  # json recurses per level; orjson stops at 1024 levels
            raise InvalidInputError(
                "malformed JSON in the inference request: nested too deeply"
            ) from None
    raise InvalidInputError(f"malformed JSON in the inference request: {error}") from None
