"""One gRPC request message on the built-in server: taken out of a unary call's body, and
inflated when it is flagged compressed, within its method's limit (transport/inflate.py), by
unary (grpc_server.py) and streaming (grpc_stream.py) calls alike."""

from __future__ import annotations

from collections.abc import Callable

from inferplex.errors import InferplexError, InvalidInputError
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated, inflate

__all__ = ["inflate_message", "unary_message"]


def unary_message(stream: Stream) -> tuple[bytes | memoryview, bool]:
    """The one message of a unary call's body (not copied when the connection read it into
    the buffer its prefix sized), and whether it is flagged compressed."""
    size = stream.body_bytes
    if size < 5:
        raise InvalidInputError("the request carries no gRPC message")
    prefix = stream.head if len(stream.head) == 5 else stream.data()[:5]
    length = int.from_bytes(prefix[1:5], "big")
    if length != size - 5:
        raise InvalidInputError(
            f"a unary call carries one message: its prefix says {length} bytes, {size - 5} followed"
        )
    return stream.data(5), prefix[0] != 0


async def inflate_message(
    message: bytes | memoryview,
    encoding: bytes,
    limit: int,
    budget: ByteBudget,
    too_large: Callable[[], InferplexError],
) -> Inflated:
    """A message flagged compressed (without its prefix) inflated as the call's
    ``grpc-encoding`` says, at most ``limit`` bytes, charged to ``budget`` until released."""
    if encoding == b"identity":
        raise InvalidInputError("a message is flagged compressed but grpc-encoding is identity")
    what = f"the {encoding.decode()} message"
    return await inflate(message, encoding, limit, budget, what, too_large)
