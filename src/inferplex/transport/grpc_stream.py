"""A bidirectional streaming call on the built-in gRPC server (transport/grpc_server.py).

The request body arrives as it comes (HTTP/2 DATA frames kept as they came); each complete
length-prefixed message goes to the method's handler when it asks for the next, and only
then are its bytes given back to the stream's flow-control window: a handler that stops
reading (a stream with as many requests in flight as it may have) holds the client back.
The window opens for the rest of a message not yet whole, whatever its size (up to the
message limit): a message larger than the window would otherwise wait for itself.
Responses go out as the handler yields them: one header block first, each message as DATA
as the peer's windows allow (the next response waits until the last is out, so a slow
reader holds the handler back), the status in the trailers. A reset stream, a closed
connection or the server stopping cancels the handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from inferplex.errors import InferplexError, InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.errors import GRPC_STATUS
from inferplex.transport.grpc_message import inflate_message
from inferplex.transport.http2 import Http2Connection, Stream
from inferplex.transport.http2_wire import literal_header_block
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated

logger = logging.getLogger(__name__)

#: gRPC status codes (grpcio's numbers)
OK, INTERNAL, UNAVAILABLE = 0, 13, 14
ENCODINGS = b"identity,deflate,gzip"
#: a response's header block (":status: 200" is entry 8 of HPACK's static table)
OK_HEAD = b"\x88" + literal_header_block(
    [(b"content-type", b"application/grpc"), (b"grpc-accept-encoding", ENCODINGS)]
)

#: what ends the stream of messages: None (the client's side ended) or the error that did
_End = InferplexError | None


class StreamingCall:
    """One call of a streaming method; the server tells it of its body and its windows."""

    def __init__(
        self,
        connection: Http2Connection,
        stream: Stream,
        method: Any,
        call: Any,
        encoding: bytes,
        limit: int,
        max_response: int,
        too_large: Callable[[], InferplexError],
        budget: ByteBudget,
    ) -> None:
        """``limit``: the method's request message limit, on each message's compressed and
        inflated size (``too_large()`` past it); ``max_response``: the response's limit;
        inflated messages are charged to ``budget`` until the handler asks for the next."""
        self._connection = connection
        self._stream = stream
        self._method = method
        self._call = call
        self._encoding = encoding
        self._max_message = limit
        self._max_response = max_response
        self.too_large = too_large
        self._budget = budget
        self._pending = bytearray()  # bytes of a message not yet whole
        #: whole messages not yet taken (with their size on the wire), then how it ended
        self._messages: asyncio.Queue[tuple[bytes, int] | tuple[_End]] = asyncio.Queue()
        self._ended = False
        self._drained: asyncio.Future[None] | None = None

    # -- from the server (event loop) ---------------------------------------------------------
    def data(self) -> None:
        """More of the body arrived (``stream.body``): queue the messages now whole."""
        stream = self._stream
        if stream.body:
            for chunk in stream.body:
                self._pending += chunk
            stream.body.clear()
        pending = self._pending
        offset = 0
        while len(pending) - offset >= 5:
            length = int.from_bytes(pending[offset + 1 : offset + 5], "big")
            if length > self._max_message:
                self.fail(self.too_large())
                return
            end = offset + 5 + length
            if end > len(pending):
                break
            self._messages.put_nowait((bytes(pending[offset:end]), 5 + length))
            offset = end
        del pending[:offset]
        # what the connection counts against the body size limit: the message not yet whole
        stream.body_bytes = len(pending)
        if len(pending) >= 5:  # its window opens for the rest of it, however large
            due = 5 + int.from_bytes(pending[1:5], "big") - len(pending)
            self._connection.expect(stream, due)

    def end(self) -> None:
        """The client ended its side: the last messages, then the end."""
        self.data()
        if self._pending:
            self.fail(InvalidInputError("the stream ended inside a message"))
        elif not self._ended:
            self._ended = True
            self._messages.put_nowait((None,))

    def fail(self, error: InferplexError) -> None:
        """The body can no longer be read (too large, buffers full): the handler learns it
        from the stream of messages, and the call ends with ``error``."""
        if not self._ended:
            self._ended = True
            self._pending.clear()
            self._messages.put_nowait((error,))

    def drained(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- the call (its task) --------------------------------------------------------------
    async def run(self) -> None:
        connection, stream = self._connection, self._stream
        connection.send_headers(stream, OK_HEAD)
        responses = self._method.handler(self._requests(), self._call)
        code, message = OK, ""
        try:
            async for response in responses:
                body = self._method.serialize(response)
                if len(body) > self._max_response:
                    raise too_large(self._max_response, "response")
                if not connection.send_data(stream, b"\x00" + len(body).to_bytes(4, "big") + body):
                    self._drained = asyncio.get_running_loop().create_future()
                    await self._drained
        except asyncio.CancelledError:
            # a reset stream or a gone connection reads nothing more; a stopping server's
            # client hears why
            code, message = UNAVAILABLE, "the server is shutting down"
        except InferplexError as exc:
            code, message = GRPC_STATUS[exc.code].value[0], exc.message
        except Exception as exc:
            logger.exception("gRPC %s failed", self._call.method)
            code, message = INTERNAL, f"{self._call.method} failed: {exc}"
        finally:
            await responses.aclose()
            stream.task = None
        connection.send_trailers(stream, _trailers(code, message))

    async def _requests(self) -> Any:
        """The handler's view: each message parsed as it is taken (its bytes given back to
        the windows then)."""
        parse, connection, stream = self._method.parse, self._connection, self._stream
        inflated: Inflated | None = None  # the last message's, charged until the next
        try:
            while True:
                item = await self._messages.get()
                if inflated is not None:
                    inflated.release()
                    inflated = None
                if len(item) == 1:
                    if item[0] is not None:
                        raise item[0]
                    return
                message, size = item
                connection.taken(stream, size)
                if message[0] == 0:
                    yield parse(message[5:])
                    continue
                inflated = await inflate_message(
                    memoryview(message)[5:],
                    self._encoding,
                    self._max_message,
                    self._budget,
                    self.too_large,
                )
                yield parse(inflated.data)
        finally:
            if inflated is not None:
                inflated.release()


def _trailers(code: int, message: str) -> bytes:
    pairs = [(b"grpc-status", str(code).encode())]
    if message:
        pairs.append((b"grpc-message", percent_encode(message)))
    return literal_header_block(pairs)


def percent_encode(message: str) -> bytes:
    """grpc-message encoding: bytes outside printable ASCII, and '%', as %XX."""
    out = bytearray()
    for byte in message.encode():
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def too_large(
    limit: int, what: str = "request", flag: str = "INFERPLEX_MAX_GRPC_MESSAGE_BYTES"
) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"the {what} message is larger than the limit of {limit} bytes ({flag})"
    )
