"""What a unary gRPC answer means, for the lean client (``grpc_wire.GrpcConnection``): the
message of a successful answer, or the failure its HTTP status, trailers or reset name
(gRPC's PROTOCOL-HTTP2.md and http-grpc-status-mapping.md)."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote_to_bytes

from inferplex.transport.http2_wire import CANCEL, ENHANCE_YOUR_CALM, REFUSED_STREAM, Headers
from inferplex_tools.benchtool.clients import RequestFailed
from inferplex_tools.benchtool.grpc_calls import PREFIX

#: gRPC status codes by number
_CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip
#: the code of an answer that is not HTTP 200 (gRPC's http-grpc-status-mapping.md)
_HTTP_CODES = {
    b"400": "INTERNAL", b"401": "UNAUTHENTICATED", b"403": "PERMISSION_DENIED",
    b"404": "UNIMPLEMENTED", b"429": "UNAVAILABLE", b"502": "UNAVAILABLE",
    b"503": "UNAVAILABLE", b"504": "UNAVAILABLE",
}  # fmt: skip
#: the code of a stream the server reset (PROTOCOL-HTTP2.md); any other reason is INTERNAL
_RESET_CODES = {
    REFUSED_STREAM: "UNAVAILABLE", CANCEL: "CANCELLED", ENHANCE_YOUR_CALM: "RESOURCE_EXHAUSTED",
}  # fmt: skip


class Continuation(NamedTuple):
    """An answer's header block that CONTINUATION frames carry on."""

    stream_id: int
    flags: int
    fragments: list[bytes]


def failed(code: str, message: str) -> RequestFailed:
    """A call's failure: the gRPC code's name and what happened."""
    return RequestFailed(f"{code}: {message}")


def http_failure(status: bytes | None) -> RequestFailed:
    """An answer whose ``:status`` is not 200."""
    shown = (status or b"none").decode(errors="replace")
    return failed(_HTTP_CODES.get(status or b"", "UNKNOWN"), f"HTTP {shown}")


def reset_failure(code: int) -> RequestFailed:
    """A stream the server reset with RST_STREAM ``code``."""
    return failed(_RESET_CODES.get(code, "INTERNAL"), f"the server reset the stream ({code})")


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of header ``name``, or None."""
    for key, value in headers:
        if key == name:
            return value
    return None


def answer_of(trailers: Headers | None, parts: list[bytes | memoryview]) -> bytes | RequestFailed:
    """An ended answer: its message when its trailers say grpc-status 0, else the failure."""
    if trailers is None:
        return failed("INTERNAL", "an answer without trailers")
    status = header_value(trailers, b"grpc-status")
    if status == b"0":
        return _message(parts)
    if status is None:
        return failed("UNKNOWN", "an answer without grpc-status")
    number = int(status) if status.isdigit() else -1
    code = _CODES[number] if 0 <= number < len(_CODES) else f"status {number}"
    message = unquote_to_bytes(header_value(trailers, b"grpc-message") or b"")
    return RequestFailed(f"{code}: {message.decode(errors='replace')}")


def _message(parts: list[bytes | memoryview]) -> bytes | RequestFailed:
    """The one message of an answer's DATA, without its 5-byte prefix (copied once)."""
    if not parts:
        return failed("INTERNAL", "an answer without a message")
    first = parts[0]
    if len(first) < 5:
        first = b"".join(parts)
        parts = [first]
        if len(first) < 5:
            return failed("INTERNAL", "a message shorter than its prefix")
    flag, length = PREFIX.unpack_from(first)
    if flag:
        return failed("INTERNAL", f"a message with flags {flag} (compressed; none was asked)")
    rest = memoryview(first)[5:]
    message = bytes(rest) if len(parts) == 1 else b"".join([rest, *parts[1:]])
    if len(message) != length:
        return failed("INTERNAL", f"{len(message)} bytes after a prefix of {length}")
    return message
