"""The V2 gRPC codec: protocol messages <-> core types.

Inference is the hot path: raw tensors become read-only numpy views of the message's bytes
and outputs are written to ``raw_output_contents`` (what perf_analyzer and tritonclient
read); ``decode_infer_request_bytes`` / ``encode_infer_response_bytes`` work on the wire
bytes and skip protobuf for messages shaped like ones seen before. Typed contents are read in
``grpc_contents.py``; the answers that are not inference, in ``grpc_messages.py``.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from inferplex.dataplane.checks import (
    CheckFactory,
    InputCheck,
    check_dims,
    input_dtype,
    raw_size_error,
    requested_output,
    shared_input,
    shared_output,
)
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.datatypes import (
    V2_TO_NUMPY,
    deserialize_bytes,
    reshape_input,
    serialize_bytes,
    view_input,
)
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2.grpc_contents import decode_typed
from inferplex.protocol.v2.layouts import LayoutCache
from inferplex.protocol.v2.protowire import RAW_INPUT_TAG, raw_inputs_start, varint
from inferplex.security.charges import BYTES_ELEMENT_COST, charge, charged
from inferplex.shm.registry import REGION, Regions
from inferplex.types import (
    InferenceRequest,
    InferenceResponse,
    Parameters,
    RequestedOutput,
    Tensor,
)

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


def decode_infer_request(
    msg: Any, shm: Regions | None = None, checks: CheckFactory | None = None
) -> InferenceRequest:
    """Turn a ModelInferRequest into an InferenceRequest; InvalidInputError naming the tensor
    and field when the data does not match the declared datatype and shape. Tensors that name
    a shared-memory region are read from / checked against ``shm``. ``checks`` gives what
    runs on each input's declared name, datatype and shape before its data is decoded. The
    checks of each tensor and requested output are the data plane's, run as they are met."""
    check: InputCheck | None = None if checks is None else checks(msg.model_name, msg.model_version)
    # every field read from a message builds a Python object: each is read once
    raw = msg.raw_input_contents
    tensors = msg.inputs
    if raw and len(raw) > len(tensors):
        _raw_count_error(len(raw), len(tensors))
    entry = 0  # the next raw_input_contents entry: inputs in shared memory have none
    inputs: list[Tensor] = []
    for tensor in tensors:
        name = tensor.name
        datatype = tensor.datatype
        dtype = input_dtype(name, datatype)
        shape = tuple(tensor.shape)
        check_dims(name, shape)
        if check is not None:
            check(name, datatype, shape)
        params: Parameters = {}
        if tensor.parameters:
            params = parameters_from_proto(tensor.parameters)
            if REGION in params:
                data = shared_input(shm, name, params, datatype, shape)
                inputs.append(Tensor(name, datatype, shape, data, params))
                continue
        if raw:
            buffer = _raw_entry(tensor, name, msg.model_name, raw, entry, len(tensors))
            data = _decode_raw(buffer, name, datatype, dtype, shape, entry)
            entry += 1
        else:
            data = decode_typed(tensor.contents, name, datatype, shape)
        inputs.append(Tensor(name, datatype, shape, data, params))
    if entry != len(raw):
        _raw_count_error(len(raw), len(tensors))

    parameters = msg.parameters
    return InferenceRequest(
        msg.model_name,
        inputs,
        msg.model_version,
        msg.id,
        _decode_outputs(msg.outputs, shm),
        parameters_from_proto(parameters) if parameters else {},
    )


def _raw_entry(tensor: Any, name: str, model: str, raw: Any, entry: int, inputs: int) -> bytes:
    """The ``entry``-th raw_input_contents, the data of the input ``tensor`` (which must not
    also have typed contents)."""
    if tensor.HasField("contents") and tensor.contents.ByteSize():
        # Triton's text, which its grpc_explicit_*_content_client examples check
        raise InvalidInputError(
            "contents field must not be specified when using raw_input_contents for "
            f"'{name}' for model '{model}'; use one or the other for all inputs"
        )
    if entry >= len(raw):
        _raw_count_error(len(raw), inputs)
    buffer: bytes = raw[entry]
    return buffer


def _decode_outputs(messages: Any, shm: Regions | None) -> list[RequestedOutput]:
    """The requested outputs, their parameters checked by the data plane (ClassifiedOutputs
    when one is asked for as its top classes)."""
    outputs: list[RequestedOutput] = []
    classified = False
    for out in messages:
        requested = RequestedOutput(out.name)
        if out.parameters:
            requested.parameters = parameters_from_proto(out.parameters)
            if requested_output(requested.name, requested.parameters, shm):
                classified = True
        outputs.append(requested)
    return ClassifiedOutputs(outputs) if classified else outputs


def _raw_count_error(entries: int, inputs: int) -> None:
    raise InvalidInputError(
        f"raw_input_contents has {entries} entries but the request declares {inputs} inputs; "
        "send one entry per input (but those in shared memory), in the order of 'inputs'"
    )


def _decode_raw(
    buffer: bytes, name: str, datatype: str, dtype: np.dtype, shape: tuple[int, ...], index: int
) -> np.ndarray:
    count = prod(shape)
    if datatype == "BYTES":
        # one Python object per element, and a copy of their bytes: charged before they are cut
        charge(
            count * BYTES_ELEMENT_COST + len(buffer), "input '%s': %d BYTES elements", name, count
        )
        return reshape_input(deserialize_bytes(buffer, count, name), shape, name)
    if len(buffer) != count * dtype.itemsize:
        raise raw_size_error(name, f"raw_input_contents[{index}]", len(buffer), datatype, shape)
    # A read-only view of the message's bytes: no copy on the hot path.
    return view_input(buffer, dtype, shape, name)


# ---- InferenceResponse -> ModelInferResponse ----


def encode_infer_response(
    response: InferenceResponse,
    request: InferenceRequest | None = None,
    shm: Regions | None = None,
) -> Any:
    """Turn an InferenceResponse into a ModelInferResponse with every output's data in
    raw_output_contents (the form perf_analyzer and tritonclient read). An output that the
    ``request`` directed to a shared-memory region is written there instead; its entry in
    raw_output_contents stays empty, so the others keep their positions."""
    targets = _shared_outputs(request)
    if targets:
        outputs = []
        contents = []
        for tensor in response.outputs:
            target = targets.get(tensor.name)
            if target is None:
                outputs.append(tensor)
                contents.append(tensor_bytes(tensor))
            else:
                written = shared_output(shm, tensor.name, target, tensor.datatype, tensor.data)
                parameters = {**tensor.parameters, **written}
                outputs.append(
                    Tensor(tensor.name, tensor.datatype, tensor.shape, tensor.data, parameters)
                )
                contents.append(b"")
        response = InferenceResponse(
            response.model_name, response.model_version, outputs, response.id, response.parameters
        )
        msg = _response_without_data(response)
        msg.raw_output_contents.extend(contents)
        return msg
    msg = _response_without_data(response)
    msg.raw_output_contents.extend(tensor_bytes(tensor) for tensor in response.outputs)
    return msg


def _shared_outputs(request: InferenceRequest | None) -> dict[str, Parameters]:
    """The outputs a request directs to shared memory, with their parameters."""
    if request is None or not request.outputs:
        return {}
    return {out.name: out.parameters for out in request.outputs if REGION in out.parameters}


def _response_without_data(response: InferenceResponse) -> Any:
    msg = pb.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        fill_parameters(msg.parameters, response.parameters)
    for tensor in response.outputs:
        out = msg.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.parameters:
            fill_parameters(out.parameters, tensor.parameters)
    return msg


def tensor_bytes(tensor: Tensor) -> bytes:
    """A tensor's data in the raw V2 layout (BYTES: length-prefixed elements)."""
    if tensor.datatype == "BYTES":
        return serialize_bytes(np.asarray(tensor.data))  # str elements UTF-8 encoded
    data = tensor.data
    expected = V2_TO_NUMPY[tensor.datatype]
    dtype = data.dtype
    if dtype is not expected and dtype != expected:
        # a backend may hand back a wider type or another byte order; the wire needs exact
        data = data.astype(expected)
    return data.tobytes()  # C order, whatever the array's strides


# ---- ModelInfer on the wire ----
#
# A client sends the same request again and again but for its tensors' bytes, and gets the
# same answer but for its outputs' bytes. Both messages carry those bytes in their last field
# (protobuf writes fields in number order), so what comes before repeats: a request that is a
# known prefix followed by raw contents of the known sizes skips the protobuf parse and every
# check, and a response whose outputs have names, datatypes and shapes seen before skips
# building the message. Anything else takes the full path.

_RAW_OUTPUT_TAG = b"\x32"  # ModelInferResponse.raw_output_contents: field 6, length-delimited
_LAYOUTS_KEPT = 256
#: top-level fields looked at for the raw entries' start when a message is charged
_SCANNED_FIELDS = 64


def decode_infer_request_bytes(
    data: bytes | bytearray | memoryview,
    shm: Regions | None = None,
    checks: CheckFactory | None = None,
) -> InferenceRequest:
    """A serialised ModelInferRequest as an InferenceRequest, like ``decode_infer_request``;
    a message protobuf cannot parse is an InvalidInputError. ``data`` may be any bytes-like
    object (the gRPC server's is a writable buffer): the tensors viewing it are read-only.
    A message of a layout seen before holds fixed-size raw tensors only, viewed in place:
    ``checks`` run on the others."""
    view = memoryview(data).toreadonly()
    for layout in _REQUEST_LAYOUTS.get(len(view), ()):  # known_request, one call less
        request = layout.request(view)
        if request is not None:
            return request
    # protobuf copies the message, and each raw_input_contents entry read is copied again;
    # what comes before the raw entries (typed contents: each repeated element a 16-byte
    # slot in protobuf's arena, from 2 bytes on the wire) up to 8 times its size
    if charged():
        start = raw_inputs_start(view, _SCANNED_FIELDS)
        typed = len(view) if start is None else start
        charge(2 * len(view) + 6 * typed, "the request message of %d bytes", len(view))
    try:
        message = pb.ModelInferRequest.FromString(view)
    except DecodeError as exc:
        raise InvalidInputError(f"malformed ModelInferRequest: {exc}") from None
    request = decode_infer_request(message, shm, checks)
    if message.raw_input_contents:
        _remember_layout(view, request)
    return request


def known_layout(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is a message of a layout seen before (its decoding is no work: its
    fixed-size raw tensors are viewed in place)."""
    view = memoryview(data).toreadonly()
    return any(layout.matches(view) for layout in _REQUEST_LAYOUTS.get(len(view), ()))


def known_request(data: bytes | bytearray | memoryview) -> InferenceRequest | None:
    """The request in ``data`` if it is a message of a layout seen before (fixed-size raw
    tensors, viewed in place: microseconds at any size), else None."""
    view = memoryview(data).toreadonly()
    for layout in _REQUEST_LAYOUTS.get(len(view), ()):
        request = layout.request(view)
        if request is not None:
            return request
    return None


def encode_infer_response_bytes(
    response: InferenceResponse,
    request: InferenceRequest | None = None,
    shm: Regions | None = None,
) -> bytes:
    """``encode_infer_response(response, request, shm).SerializeToString()``, byte for byte."""
    if response.parameters or (
        request is not None and request.outputs and _shared_outputs(request)
    ):
        whole: bytes = encode_infer_response(response, request, shm).SerializeToString()
        return whole
    key: list[Any] = [response.model_name, response.model_version, response.id]
    outputs = response.outputs
    for tensor in outputs:
        if tensor.parameters:
            whole = encode_infer_response(response).SerializeToString()
            return whole
        key.append((tensor.name, tensor.datatype, tuple(tensor.shape)))
    known = _RESPONSE_LAYOUTS.get(tuple(key))
    if known is None:
        known = _response_layout(response)
        _RESPONSE_LAYOUTS.keep(tuple(key), known)
    prefix, fields = known
    parts = [prefix]
    for tensor, (field, nbytes) in zip(outputs, fields, strict=True):
        data = tensor_bytes(tensor)
        parts.append(field if len(data) == nbytes else _RAW_OUTPUT_TAG + varint(len(data)))
        parts.append(data)
    return b"".join(parts)


def _response_layout(response: InferenceResponse) -> tuple[bytes, list[tuple[bytes, int]]]:
    """The serialised response without its raw contents, and per output the tag and length
    of its raw field for the size its datatype and shape give (BYTES: none, -1)."""
    fields: list[tuple[bytes, int]] = []
    for tensor in response.outputs:
        if tensor.datatype == "BYTES":
            fields.append((b"", -1))
        else:
            nbytes = prod(tensor.shape) * V2_TO_NUMPY[tensor.datatype].itemsize
            fields.append((_RAW_OUTPUT_TAG + varint(nbytes), nbytes))
    return _response_without_data(response).SerializeToString(), fields


class _RequestLayout:
    """A request message seen before, as the bytes before its raw_input_contents and what
    the decoded request held, whose inputs all came from raw contents in fixed-size datatypes.
    Requests built from it share its parameter dicts and requested outputs (nothing downstream
    writes into them; the data plane gives a request a new parameter dict to add one, which
    leaves this layout's as it was decoded)."""

    __slots__ = ("id", "inputs", "model_name", "model_version", "outputs", "parameters", "prefix")

    def __init__(self, prefix: bytes, request: InferenceRequest) -> None:
        self.prefix = prefix
        # the request's fields, not the request: the decoded request itself goes on
        self.model_name = request.model_name
        self.model_version = request.model_version
        self.id = request.id
        self.outputs = request.outputs
        self.parameters = request.parameters
        #: per input: the raw field's tag and length, then what its tensor needs
        self.inputs = [
            (
                bytes((RAW_INPUT_TAG,)) + varint(t.data.nbytes),
                t.data.nbytes,
                t.name,
                t.datatype,
                t.data.dtype,
                t.shape,
                t.parameters,
            )
            for t in request.inputs
        ]

    @property
    def size(self) -> int:
        """The length of every message of this layout."""
        return len(self.prefix) + sum(len(field) + nbytes for field, nbytes, *_ in self.inputs)

    def matches(self, view: memoryview) -> bool:
        """Whether ``view`` is this layout's prefix and raw fields (``request``'s test)."""
        prefix = self.prefix
        if view[: len(prefix)] != prefix:
            return False
        pos = len(prefix)
        for field, nbytes, *_ in self.inputs:
            if view[pos : pos + len(field)] != field:
                return False
            pos += len(field) + nbytes
        return True

    def request(self, view: memoryview) -> InferenceRequest | None:
        """The request in ``view`` (a read-only view of a message of ``size`` bytes) if it is
        this layout's prefix followed by raw contents of this layout's sizes, else None."""
        prefix = self.prefix
        if view[: len(prefix)] != prefix:
            return None
        pos = len(prefix)
        inputs: list[Tensor] = []
        for field, nbytes, name, datatype, dtype, shape, parameters in self.inputs:
            if view[pos : pos + len(field)] != field:
                return None
            pos += len(field)
            # a read-only view of the message's bytes, as in the full decode
            array = np.ndarray(shape, dtype, view[pos : pos + nbytes])
            inputs.append(Tensor(name, datatype, shape, array, parameters))
            pos += nbytes
        return InferenceRequest(
            self.model_name, inputs, self.model_version, self.id, self.outputs, self.parameters
        )


#: request layouts by the length of their messages, the latest few of each length
_REQUEST_LAYOUTS: LayoutCache[int, tuple[_RequestLayout, ...]] = LayoutCache(_LAYOUTS_KEPT)
_LAYOUTS_PER_LENGTH = 8
#: response layouts by the model, version, id and each output's name, datatype and shape
_RESPONSE_LAYOUTS: LayoutCache[tuple[Any, ...], tuple[bytes, list[tuple[bytes, int]]]] = (
    LayoutCache(_LAYOUTS_KEPT)
)


def _remember_layout(data: memoryview, request: InferenceRequest) -> None:
    """Keep the layout of a decoded message when its raw contents come last and every input
    is one of them, in a fixed-size datatype (not in shared memory), and no output goes to
    shared memory (a layout is replayed without the checks of its outputs, and a region is
    its principal's: each request's are checked against its own)."""
    if any(t.datatype == "BYTES" or REGION in t.parameters for t in request.inputs):
        return
    if any(REGION in out.parameters for out in request.outputs):
        return
    start = raw_inputs_start(data)
    if start is None:
        return
    layout = _RequestLayout(data[:start].tobytes(), request)
    if layout.size != len(data):
        return
    seen = _REQUEST_LAYOUTS.get(len(data), ())
    _REQUEST_LAYOUTS.keep(len(data), (*seen[1 - _LAYOUTS_PER_LENGTH :], layout))
