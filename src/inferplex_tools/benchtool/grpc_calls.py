"""One unary gRPC call of the lean client (``grpc_wire.GrpcConnection``): its request, encoded
once and sent any number of times, and the state of its stream while it is in flight."""

from __future__ import annotations

import asyncio
import struct
from typing import NamedTuple

from inferplex.transport.http2_wire import MIN_FRAME_SIZE, literal_header_block

#: a gRPC message's prefix: compressed flag, length
PREFIX = struct.Struct(">BL")
#: how often a stream the server refused (REFUSED_STREAM: not processed) is sent again
MAX_REFUSALS = 3

Waiter = asyncio.Future[bytes]


class PreparedCall:
    """One unary call's request, encoded once: its header block and its gRPC message."""

    __slots__ = ("block", "body")

    def __init__(self, block: bytes, body: bytes) -> None:
        self.block = block
        self.body = memoryview(body)


def prepare(authority: bytes, path: str, message: bytes) -> PreparedCall:
    """A call of method ``path`` (``/package.Service/Method``) with ``message`` (a serialised
    protobuf) to the server named ``authority``."""
    headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode())]
    headers += [(b":authority", authority), (b"content-type", b"application/grpc")]
    block = literal_header_block([*headers, (b"te", b"trailers")])
    if len(block) > MIN_FRAME_SIZE:  # one HEADERS frame whatever the server's settings
        raise ValueError(f"a header block of {len(block)} bytes: the path is too long")
    return PreparedCall(block, PREFIX.pack(0, len(message)) + message)


class Queued(NamedTuple):
    """A call waiting for a stream (the server's concurrent-stream limit, or a refusal)."""

    prepared: PreparedCall
    future: Waiter
    refusals: int
    """how often the server refused it already (REFUSED_STREAM: not processed)"""


class CallStream:
    """One call in flight."""

    __slots__ = (
        "future", "head", "id", "outbox", "parts", "prepared", "refusals", "unacked", "window",
    )  # fmt: skip

    def __init__(
        self, stream_id: int, prepared: PreparedCall, future: Waiter, window: int, refusals: int
    ) -> None:
        self.id = stream_id
        self.prepared = prepared
        self.future = future
        self.window = window  # what we may still send on it
        self.outbox: memoryview | None = prepared.body  # None once END_STREAM is sent
        self.parts: list[bytes | memoryview] = []  # the answer's DATA
        self.unacked = 0  # DATA received and not yet given back with WINDOW_UPDATE
        self.head = False  # the answer's headers are in
        self.refusals = refusals

    def again(self) -> Queued | None:
        """The call to send again after the server refused its stream, unless it has been
        refused too often."""
        if self.refusals >= MAX_REFUSALS:
            return None
        return Queued(self.prepared, self.future, self.refusals + 1)
