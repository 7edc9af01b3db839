"""Request messages on the grpc.aio twin (transport/grpcio_server.py), bounded as the built-in
server bounds them.

grpc-core has one receive limit for every method and inflates a compressed message up to it
before any handler runs: a 255 KB gzip message to ServerLive became 250 MiB. So the server
runs with ``grpc.per_message_decompression`` off: grpc-core hands over each message as it
came (its receive limit then bounds the compressed size), and it is inflated here, after the
guard, within its method's limit, charged to the server's byte budget, off the event loop
where the limit is large (transport/inflate.py).

grpc-core does not say which messages came compressed, so the bytes tell: a gzip stream
starts with 1f 8b, which no protobuf message can (field 3 with wire type 7), and a zlib
stream as grpc-core and zlib write it ("deflate") with 78 and a check byte, which would be an
unknown field 15 first in a protobuf message: a message that looks like one but does not
inflate is taken as it came.
"""

from __future__ import annotations

from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated, inflate

__all__ = ["plain"]


async def plain(
    message: bytes, limit: int, max_message: int, budget: ByteBudget
) -> tuple[bytes | memoryview, Inflated | None]:
    """A request message, inflated if it came compressed, at most ``limit`` bytes either way
    (``max_message``: the server's limit, named when it is the one); the inflated bytes stay
    charged to ``budget`` until the Inflated is released."""
    flag = "MAX_GRPC_MESSAGE_BYTES" if limit == max_message else "MAX_SMALL_REQUEST_BYTES"

    def too_large() -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"the request message is larger than the limit of {limit} bytes (INFERPLEX_{flag})"
        )

    if len(message) > limit:
        raise too_large()
    coding = _coding(message)
    if coding is None:
        return message, None
    try:
        inflated = await inflate(
            message, coding, limit, budget, f"the {coding.decode()} message", too_large
        )
    except InvalidInputError:
        if coding == b"gzip":
            raise
        return message, None  # a protobuf message that begins like a zlib stream
    return inflated.data, inflated


def _coding(message: bytes) -> bytes | None:
    """gzip or deflate when ``message`` begins as such a stream does, else None."""
    if message[:2] == b"\x1f\x8b":
        return b"gzip"
    if len(message) >= 2 and message[0] == 0x78 and (0x7800 | message[1]) % 31 == 0:
        return b"deflate"
    return None
