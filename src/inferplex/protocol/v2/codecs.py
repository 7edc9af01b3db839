"""The V2 protocol's codecs on the data plane (``dataplane/codec.py``): REST (JSON and the
binary tensor data extension), gRPC ModelInfer and gRPC ModelStreamInfer. Each only
translates; what a call goes through is the data plane's.

ModelStreamInfer answers each response as a ModelStreamInferResponse carrying its request's
id; an error goes in the stream as the message's ``error_message`` (the stream stays open).
A request with the parameter ``triton_enable_empty_final_response`` gets
``triton_final_response`` on each response and an empty final one, as Triton marks the end
of a decoupled request.
"""

from __future__ import annotations

from typing import Any

from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane.checks import CheckFactory
from inferplex.dataplane.codec import Body, CallMeta, HttpReply, SpanLabel
from inferplex.dataplane.offload import OFFLOAD_BYTES
from inferplex.errors import ErrorCode, InferplexError
from inferplex.protocol.v2 import grpc_codec, rest
from inferplex.protocol.v2.errors import GRPC_STATUS, HTTP_STATUS
from inferplex.protocol.v2.protowire import varint
from inferplex.protocol.v2.rest_encode import encode_infer_response
from inferplex.shm.registry import Regions
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = [
    "EMPTY_FINAL",
    "FINAL_RESPONSE",
    "GRPC",
    "GRPC_STREAM",
    "REST",
    "http_status",
    "stream_error",
]

#: the request parameter asking for an empty final response, and the response parameter
#: that marks the final one (Triton's names)
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"

_JSON = [(b"content-type", b"application/json")]
_BINARY = b"application/octet-stream"


def http_status(code: ErrorCode | None) -> int:
    """The HTTP status of a call that ended with ``code`` (None: it succeeded)."""
    return 200 if code is None else HTTP_STATUS[code]


def grpc_status(code: ErrorCode | None) -> int:
    """The gRPC status code of a call that ended with ``code`` (None: OK)."""
    return 0 if code is None else int(GRPC_STATUS[code].value[0])


class RestCodec:
    """``POST /v2/models/{m}[/versions/{v}]/infer``: a JSON body, or a JSON header of
    ``meta.header_length`` bytes and the inputs' binary data (``rest.py``)."""

    def span(self, meta: CallMeta) -> SpanLabel:
        attributes = {
            "http.request.method": "POST",
            "rpc.system": "kserve_v2_rest",
            "inferplex.model.name": meta.model,
        }
        if meta.version:
            attributes["inferplex.model.version"] = meta.version
        return SpanLabel(
            f"POST /v2/models/{meta.model}/infer",
            attributes,
            "http.response.status_code",
            http_status,
        )

    def work(self, body: Body, meta: CallMeta) -> int:
        size = len(body)
        return size if size <= OFFLOAD_BYTES else rest_work(body, meta.header_length)

    def decode(
        self, body: Body, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        if checks is None:  # on the loop: small, far below what pauses the garbage collector
            return rest.decode_body(body, meta.header_length, meta.model, meta.version, regions)
        return rest.decode_infer_request(
            body, meta.header_length, meta.model, meta.version, regions, checks
        )

    def encode(
        self, response: InferenceResponse, request: InferenceRequest, meta: CallMeta
    ) -> HttpReply:
        payload, json_length = encode_infer_response(response, request, meta.regions)
        if json_length is None:
            return 200, payload, _JSON
        return (
            200,
            payload,
            [
                (b"content-type", _BINARY),
                (b"inference-header-content-length", str(json_length).encode()),
            ],
        )


def rest_work(body: Body, header_length: int | None) -> int:
    """How many bytes of a REST body cost decoding work: the JSON, and the binary data when
    the header names a BYTES input (fixed-size binary tensors are viewed in place, free)."""
    size = len(body)
    if header_length is None or header_length >= size:
        return size
    header = body[:header_length]
    if b'"BYTES"' in (header.tobytes() if isinstance(header, memoryview) else header):
        return size
    return header_length


_GRPC_ATTRIBUTES = {"rpc.system": "grpc", "rpc.service": "inference.GRPCInferenceService"}


class GrpcCodec:
    """gRPC ``ModelInfer``: the request message's bytes in, the response message's out
    (``grpc_codec.py``; a message of a layout seen before skips protobuf)."""

    method = "ModelInfer"

    def span(self, meta: CallMeta) -> SpanLabel:
        attributes: dict[str, Any] = {**_GRPC_ATTRIBUTES, "rpc.method": self.method}
        return SpanLabel(self.method, attributes, "rpc.grpc.status_code", grpc_status)

    def work(self, body: Body, meta: CallMeta) -> int:
        size = len(body)
        # a message of a layout seen before is viewed in place: no work at any size
        return size if size <= OFFLOAD_BYTES or not grpc_codec.known_layout(body) else 0

    def decode(
        self, body: Body, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        return grpc_codec.decode_infer_request_bytes(body, regions, checks)

    def encode(
        self, response: InferenceResponse, request: InferenceRequest, meta: CallMeta
    ) -> bytes:
        return grpc_codec.encode_infer_response_bytes(response, request, meta.regions)


class GrpcStreamCodec(GrpcCodec):
    """gRPC ``ModelStreamInfer``: each request message of the stream, answered by the
    ModelStreamInferResponse messages of its responses."""

    method = "ModelStreamInfer"

    def encoder(self, request: InferenceRequest, meta: CallMeta) -> StreamResponses:
        return StreamResponses(request, meta.regions)


class StreamResponses:
    """The ModelStreamInferResponse messages of one request's responses."""

    __slots__ = ("_marked", "_regions", "_request")

    def __init__(self, request: InferenceRequest, regions: Regions | None) -> None:
        self._request = request
        self._regions = regions
        self._marked = bool(request.parameters.get(EMPTY_FINAL))

    def head(self, first: StreamedResponse) -> None:
        return None  # the call's header block went out when it began

    def item(self, item: StreamedResponse) -> bytes | None:
        """None: a final flag alone that the client did not ask to see."""
        request = self._request
        if item.error is not None:
            return stream_error(item.error, request)
        response = item.response
        if response is None:
            if not (self._marked and item.final):
                return None
            response = InferenceResponse(request.model_name, request.model_version, [])
        response.id = request.id
        if self._marked:
            response.parameters = {**response.parameters, FINAL_RESPONSE: item.final}
        encoded = grpc_codec.encode_infer_response_bytes(response, request, self._regions)
        return _field(2, encoded)

    def end(self) -> None:
        return None


def stream_error(error: InferplexError, request: InferenceRequest | None) -> bytes:
    """A ModelStreamInferResponse with ``error_message``, and the request's id and model in
    its ``infer_response`` where the request was decoded (a client matches it by the id)."""
    message = _field(1, error.message.encode())
    if request is None:
        return message
    # ModelInferResponse: model_name = 1, model_version = 2, id = 3
    head = _field(1, request.model_name.encode()) + _field(2, request.model_version.encode())
    return message + _field(2, head + _field(3, request.id.encode()))


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    if not value:
        return b""
    return varint(number << 3 | 2) + varint(len(value)) + value


REST = RestCodec()
GRPC = GrpcCodec()
GRPC_STREAM = GrpcStreamCodec()
