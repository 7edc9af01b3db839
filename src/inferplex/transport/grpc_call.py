"""What the built-in gRPC server (grpc_server.py) knows of a call before its message: the
method table's entries (``Method``), what a handler and the guard see of a call (``Call``),
and the fields of a call's header block the server acts on (``call_head``)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from inferplex.errors import InferplexError

__all__ = [
    "Call",
    "CallHead",
    "Guard",
    "Handler",
    "Method",
    "StreamHandler",
    "call_head",
    "timeout_seconds",
]

_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}


class Call:
    """What a method and the guard see of a call besides its message; ``identity``: what
    the guard returned (who makes the call; None without a guard)."""

    __slots__ = ("_headers", "connection", "identity", "method")

    def __init__(self, method: str, headers: list[tuple[bytes, bytes]], connection: object) -> None:
        self.method = method
        self._headers = headers
        #: the HTTP/2 connection carrying the call (what a per-connection bound counts by)
        self.connection = connection
        self.identity: object = None

    def metadata(self) -> list[tuple[str, str | bytes]]:
        """The custom metadata: keys lower-case, ``-bin`` values decoded to bytes."""
        pairs: list[tuple[str, str | bytes]] = []
        for name, value in self._headers:
            if name.startswith(b":") or name in (b"content-type", b"te"):
                continue
            key = name.decode("latin-1")
            if key.endswith("-bin"):
                try:
                    pairs.append((key, base64.b64decode(value + b"==")))
                except binascii.Error:
                    pairs.append((key, value))  # not base64: as sent
            else:
                pairs.append((key, value.decode("latin-1")))
        return pairs


Handler = Callable[[Any, Call], Awaitable[Any]]
#: a bidirectional streaming RPC: the call's parsed request messages in, its responses out
StreamHandler = Callable[[AsyncIterator[Any], Call], AsyncIterator[Any]]
#: sees every call's method (path) and metadata first; raises InferplexError to refuse it,
#: or returns who makes the call (``Call.identity``)
Guard = Callable[[str, list[tuple[str, str | bytes]]], object]


@dataclass(frozen=True, slots=True)
class Method:
    """One RPC: ``parse`` reads the request message, ``handler`` answers it, ``serialize``
    writes the response; ``refused`` answers every call at once. A ``streaming`` method's
    handler is a ``StreamHandler``: each message ``parse``d, each response ``serialize``d.

    The message ``parse`` gets is bytes-like: bytes, or (usually) a writable memoryview of
    the buffer the request was read into, which the call owns; protobuf's ``FromString``
    and zlib take either."""

    handler: Handler | StreamHandler
    parse: Callable[[Any], Any]
    serialize: Callable[[Any], bytes]
    refused: InferplexError | None = None
    streaming: bool = False
    #: takes large messages (inference, loads): the server's message limit; otherwise the
    #: small one, on each message's compressed and inflated size
    large: bool = False


#: the fields of a call's header block the server acts on, and the block's size: (:method,
#: :path, content-type, grpc-encoding, grpc-timeout, size). A plain tuple, unpacked at once:
#: building a NamedTuple per call cost a microsecond
CallHead = tuple[bytes, bytes, bytes, bytes, bytes, int]


def call_head(headers: list[tuple[bytes, bytes]]) -> CallHead:
    """One pass over a call's header block."""
    http_method = path = content_type = timeout = b""
    encoding = b"identity"
    size = 0
    for name, value in headers:
        size += len(name) + len(value)
        if name == b":path":
            path = value
        elif name == b":method":
            http_method = value
        elif name == b"content-type":
            content_type = value
        elif name == b"grpc-encoding":
            encoding = value
        elif name == b"grpc-timeout":
            timeout = value
    return http_method, path, content_type, encoding, timeout, size


def timeout_seconds(value: bytes) -> float | None:
    """A ``grpc-timeout`` value (up to 8 digits and a unit) in seconds; None if malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit
