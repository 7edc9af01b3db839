"""The built-in gRPC server: unary RPCs over HTTP/2, per gRPC's "gRPC over HTTP2" protocol.

Why not grpc.aio (DESIGN.md's first choice): on the 2-core machine most of a served call's
server CPU was inside grpcio's Python/Cython layers (py-spy: 63% of the event loop's busy time
in cygrpc, 17% in inferplex), and its floor alone was above the issue's latency target.
Here a call is one HTTP/2 parse (transport/http2.py), one task, one write; grpcio stays the
clients' library. ``python -m bench.grpc_floor`` measures this server beside a bare grpc.aio
server.

What a call gets: the method by ``:path`` (UNIMPLEMENTED otherwise), a guard that sees the
method and metadata before the body is read, a metadata size limit, one length-prefixed
message (gzip/deflate compressed or not) below the message size limit (RESOURCE_EXHAUSTED as
soon as its prefix announces more, or the body passes it) and read by the connection into
one buffer of the size its prefix announces (the message ``parse`` gets: no copy),
``grpc-timeout`` deadlines (DEADLINE_EXCEEDED, and the call is cancelled), cancellation when
the client resets the stream, and a status with a percent-encoded message. Bidirectional
streaming methods run from their headers on, their messages read as they come
(transport/grpc_stream.py).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping

import grpc

from inferplex.errors import (
    HeadersTooLargeError,
    InferplexError,
    InvalidInputError,
    ServerBusyError,
    UnsupportedError,
)
from inferplex.protocol.v2.errors import GRPC_STATUS
from inferplex.transport.connections import ConnectionGate, Listener, http2_refusal
from inferplex.transport.grpc_call import (
    Call,
    Guard,
    Handler,
    Method,
    StreamHandler,
    call_head,
    timeout_seconds,
)
from inferplex.transport.grpc_message import inflate_message, unary_message
from inferplex.transport.grpc_stream import (
    ENCODINGS,
    OK_HEAD,
    StreamingCall,
    percent_encode,
    too_large,
)
from inferplex.transport.http2 import READ_BUFFER, Http2Connection, Stream
from inferplex.transport.http2_limits import Http2Counters
from inferplex.transport.http2_wire import literal_header_block
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.http_server import TLS_SHUTDOWN_TIMEOUT_S
from inferplex.transport.inflate import Inflated
from inferplex.transport.interface import GrpcMethod
from inferplex.transport.listener import ListenerSpec

__all__ = ["Call", "GrpcServer", "Guard", "Handler", "Method", "StreamHandler"]

logger = logging.getLogger(__name__)

# status codes: grpcio's numbers, the ones THE table (protocol/v2/errors.py) maps errors to
DEADLINE_EXCEEDED: int = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
RESOURCE_EXHAUSTED: int = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNIMPLEMENTED: int = grpc.StatusCode.UNIMPLEMENTED.value[0]
INTERNAL: int = grpc.StatusCode.INTERNAL.value[0]
UNAVAILABLE: int = grpc.StatusCode.UNAVAILABLE.value[0]

#: seconds a stopping server waits for its peers to close their connections
CLOSE_WAIT_S = 1.0
#: seconds a TLS handshake may take when the preface timeout is off (asyncio's default)
NO_PREFACE_HANDSHAKE_S = 60.0
#: header list size we take when no limit is configured
DEFAULT_HEADER_LIMIT = 1 << 20
_OK_HEAD = OK_HEAD
_OK_TRAILERS = literal_header_block([(b"grpc-status", b"0")])
_UNSENT = (
    "this connection's answers waiting for its flow-control windows are above the limit "
    "(INFERPLEX_HTTP2_CONNECTION_BUFFER_BYTES) and none moved for a second: read them before "
    "sending more calls"
)


class _CallState:
    __slots__ = ("call", "deadline", "encoding", "expired", "limit", "method")

    def __init__(self, method: GrpcMethod, call: Call, encoding: bytes, limit: int) -> None:
        self.method = method
        self.call = call
        self.encoding = encoding
        self.limit = limit  # the method's message limit
        self.deadline: asyncio.TimerHandle | None = None
        self.expired = False


class GrpcServer:
    """Serves ``methods`` (by path, e.g. ``/package.Service/Method``) on one address."""

    def __init__(
        self,
        methods: Mapping[str, GrpcMethod],
        spec: ListenerSpec | None = None,
        *,
        guard: Guard | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:
        """``spec``: what each client may make the server hold or do (``spec.http2``), the
        message limits (``spec.grpc``: a method not marked ``large`` takes the small one),
        the metadata limit and TLS (default: ListenerSpec()'s); ``budget`` bounds request
        bytes buffered server-wide (shared with the HTTP listeners; default: 1 GiB of its
        own), ``gate`` the connections (shared too; default: none of its own);
        ``counters`` tells how often the limits were reached."""
        spec = spec if spec is not None else ListenerSpec()
        self._methods = {path.encode(): method for path, method in methods.items()}
        self._limits = spec.http2
        self.counters = Http2Counters(budget)
        self._max_message = spec.grpc.max_message_bytes
        self._max_small = spec.grpc.small
        self._max_headers = spec.max_header_bytes
        self._guard = guard
        self._ssl = spec.tls.grpc_context() if spec.tls is not None else None
        self.gate = gate if gate is not None else ConnectionGate(0, 0)
        self.connections: set[Http2Connection] = set()
        self._server: Listener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- listening ----------------------------------------------------------------------------
    async def start(self, sock: socket.socket) -> int:
        """Serve on ``sock`` (bound; ``transport.sockets.bind``); returns its port."""
        self._loop = loop = asyncio.get_running_loop()
        header_block = (self._max_headers or DEFAULT_HEADER_LIMIT) + 1024
        read_buffer = memoryview(bytearray(READ_BUFFER))  # every connection reads here

        def connection() -> Http2Connection:
            return Http2Connection(
                self,
                self.connections,
                max_body_bytes=self._max_message + 5,
                max_header_block_bytes=header_block,
                read_buffer=read_buffer,
                limits=self._limits,
                counters=self.counters,
                loop=loop,
            )

        self._server = Listener(
            self.gate,
            sock,
            connection,
            ssl_context=self._ssl,
            # the TLS handshake has the preface's time (then the preface has its own)
            handshake_timeout_s=self._limits.preface_timeout_s or NO_PREFACE_HANDSHAKE_S,
            shutdown_timeout_s=TLS_SHUTDOWN_TIMEOUT_S,
            refusal=http2_refusal,
        )
        self._server.start()
        return int(sock.getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Stop accepting; open calls get ``grace`` seconds, then are cancelled (UNAVAILABLE)."""
        if self._server is None:
            return
        loop = asyncio.get_running_loop()
        self._server.close()
        for connection in list(self.connections):
            connection.goaway()
        deadline = loop.time() + grace
        while any(not c.idle for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        tasks = [
            stream.task
            for connection in self.connections
            for stream in connection.streams.values()
            if stream.task is not None
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for connection in list(self.connections):
            connection.finish_writing()
        # the peers close their side on our FIN; one that does not must not hold the stop
        deadline = loop.time() + CLOSE_WAIT_S
        while self.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        self._server = None

    # -- Http2App -------------------------------------------------------------------------------
    def headers_received(self, connection: Http2Connection, stream: Stream) -> None:
        http_method, path, content_type, encoding, timeout, size = call_head(stream.headers)
        if http_method != b"POST":
            _http_error(connection, stream, b"405")
            return
        if not content_type.startswith(b"application/grpc"):
            _http_error(connection, stream, b"415")
            return
        method = self._methods.get(path)
        if method is None:
            unknown = path.decode("latin-1")
            self._status(connection, stream, UNIMPLEMENTED, f"unknown method {unknown}")
            return
        if connection.flow.unsent > self._limits.connection_buffer_bytes and (
            connection.flow.answers_stalled(asyncio.get_running_loop().time())
        ):
            # answers this client does not read are held for it: no more calls until they go
            # (a client that reads them, if slowly, is not refused: they keep moving)
            self.counters.exceeded["unsent_responses"] += 1
            self._status(connection, stream, RESOURCE_EXHAUSTED, _UNSENT)
            return
        call = Call(path.decode("latin-1"), stream.headers, connection)
        if self._admit(connection, stream, call, method, size, encoding):
            self._start(connection, stream, method, call, encoding, timeout)

    def _admit(
        self,
        connection: Http2Connection,
        stream: Stream,
        call: Call,
        method: GrpcMethod,
        size: int,
        encoding: bytes,
    ) -> bool:
        """Whether ``call`` may go on: its metadata (``size`` bytes) within the limit, the
        guard's consent (``call.identity`` set), its method not refused, its ``encoding``
        known; if not, it is answered."""
        try:
            if self._max_headers and size > self._max_headers:
                raise HeadersTooLargeError(
                    f"request metadata of {size} bytes is above the limit of "
                    f"{self._max_headers} bytes (INFERPLEX_MAX_HEADER_BYTES)"
                )
            if self._guard is not None:
                call.identity = self._guard(call.method, call.metadata())
            if method.refused is not None:
                raise method.refused
            if encoding not in (b"identity", b"gzip", b"deflate"):
                raise UnsupportedError(
                    f"grpc-encoding '{encoding.decode('latin-1')}' is not supported; "
                    f"use one of {ENCODINGS.decode()}"
                )
        except InferplexError as exc:
            self._error(connection, stream, exc)
            return False
        except Exception as exc:  # a guard's bug must not take the connection down
            logger.exception("gRPC guard failed on %s", call.method)
            self._status(connection, stream, INTERNAL, f"{call.method} failed: {exc}")
            return False
        return True

    def _start(
        self,
        connection: Http2Connection,
        stream: Stream,
        method: GrpcMethod,
        call: Call,
        encoding: bytes,
        timeout: bytes,
    ) -> None:
        """An admitted call: a streaming one runs from here, a unary one waits for its
        message (under its ``grpc-timeout`` deadline)."""
        limit = self._max_message if method.large else self._max_small
        if method.streaming:  # each message is checked against the limit as it comes
            self._start_stream(connection, stream, method, call, encoding, limit)
            return
        # a body past one message of the method's size is refused as it arrives
        stream.limit = limit + 5
        state = _CallState(method, call, encoding, limit)
        stream.context = state
        stream.head_size = 5  # the message's prefix: body_head_received sizes the rest
        if timeout:
            seconds = timeout_seconds(timeout)
            if seconds is not None:
                assert self._loop is not None
                state.deadline = self._loop.call_later(
                    seconds, self._expire, connection, stream, state
                )

    def body_head_received(
        self, connection: Http2Connection, stream: Stream, head: bytes
    ) -> int | None:
        length = int.from_bytes(head[1:5], "big")
        state = stream.context
        assert isinstance(state, _CallState)
        if length > state.limit:  # refused now, not once that much has arrived
            self.body_too_large(connection, stream)
            return None
        return length

    def body_received(self, connection: Http2Connection, stream: Stream) -> None:
        state = stream.context
        if not isinstance(state, _CallState):  # a streaming call's last messages
            assert isinstance(state, StreamingCall)
            state.end()
            return
        try:
            message, compressed = unary_message(stream)
        except InferplexError as exc:
            self._error(connection, stream, exc)
            _cancel_deadline(state)
            return
        assert self._loop is not None
        stream.task = self._loop.create_task(
            self._run(connection, stream, state, message, compressed)
        )

    def data_received(self, connection: Http2Connection, stream: Stream) -> None:
        if isinstance(stream.context, StreamingCall):
            stream.context.data()

    def drained(self, connection: Http2Connection, stream: Stream) -> None:
        if isinstance(stream.context, StreamingCall):
            stream.context.drained()

    def body_too_large(self, connection: Http2Connection, stream: Stream) -> None:
        state = stream.context
        if isinstance(state, StreamingCall):
            state.fail(state.too_large())
            return
        limit = self._max_message
        if isinstance(state, _CallState):
            _cancel_deadline(state)
            limit = state.limit
        self._error(connection, stream, self._too_large(limit))

    def buffers_full(self, connection: Http2Connection, stream: Stream, server_wide: bool) -> None:
        if server_wide:
            where = "all connections", "INFERPLEX_MAX_BUFFERED_BYTES"
        else:
            where = "this connection", "INFERPLEX_HTTP2_CONNECTION_BUFFER_BYTES"
        message = (
            f"the server holds too many request bytes not yet received whole for {where[0]} "
            f"({where[1]}); retry later"
        )
        if isinstance(stream.context, StreamingCall):
            stream.context.fail(ServerBusyError(message))
            return
        if isinstance(stream.context, _CallState):
            _cancel_deadline(stream.context)
        self._status(connection, stream, RESOURCE_EXHAUSTED, message)

    def stream_reset(self, stream: Stream) -> None:
        if isinstance(stream.context, _CallState):
            _cancel_deadline(stream.context)
        if stream.task is not None:
            stream.task.cancel()

    # -- calls ----------------------------------------------------------------------------------
    def _start_stream(
        self,
        connection: Http2Connection,
        stream: Stream,
        method: GrpcMethod,
        call: Call,
        encoding: bytes,
        limit: int,
    ) -> None:
        """A streaming call runs from its headers on: its messages reach it as they come."""
        state = StreamingCall(
            connection,
            stream,
            method,
            call,
            encoding,
            limit,
            self._max_message,
            lambda: self._too_large(limit),
            self.counters.budget,
        )
        stream.context = state  # its body is read as it comes (no head_size: unsized)
        assert self._loop is not None
        stream.task = self._loop.create_task(state.run())

    def _too_large(self, limit: int) -> InferplexError:
        """A request message above its method's ``limit``, compressed or inflated."""
        self.counters.exceeded["message_size"] += 1
        if limit == self._max_message:
            return too_large(limit)
        return too_large(limit, flag="INFERPLEX_MAX_SMALL_REQUEST_BYTES")

    async def _run(
        self,
        connection: Http2Connection,
        stream: Stream,
        state: _CallState,
        message: bytes | memoryview,
        compressed: bool,
    ) -> None:
        method = state.method
        inflated: Inflated | None = None
        try:
            try:
                if compressed:  # after the guard, within the method's limit, charged
                    limit = state.limit
                    inflated = await inflate_message(
                        message,
                        state.encoding,
                        limit,
                        self.counters.budget,
                        lambda: self._too_large(limit),
                    )
                    message = inflated.data
                request = method.parse(message)
            except InferplexError:
                raise
            except Exception as exc:
                raise InvalidInputError(f"the request message could not be parsed: {exc}") from None
            # a unary method (a streaming one never gets here): its handler is a Handler
            body = method.serialize(await method.handler(request, state.call))
        except asyncio.CancelledError:
            if state.expired:
                self._status(connection, stream, DEADLINE_EXCEEDED, "the deadline passed")
            else:  # the client went away, or the server stops: nobody waits for an answer
                self._status(connection, stream, UNAVAILABLE, "the server is shutting down")
            return
        except InferplexError as exc:
            self._error(connection, stream, exc)
            return
        except Exception as exc:
            logger.exception("gRPC %s failed", state.call.method)
            self._status(connection, stream, INTERNAL, f"{state.call.method} failed: {exc}")
            return
        finally:
            _cancel_deadline(state)
            stream.task = None
            if inflated is not None:
                inflated.release()
        if len(body) > self._max_message:
            self._error(connection, stream, too_large(self._max_message, "response"))
            return
        prefix = b"\x00" + len(body).to_bytes(4, "big")
        connection.respond(stream, _OK_HEAD, prefix, body, _OK_TRAILERS)

    def _expire(self, connection: Http2Connection, stream: Stream, state: _CallState) -> None:
        state.expired = True
        state.deadline = None
        if stream.task is not None:
            stream.task.cancel()  # its answer is DEADLINE_EXCEEDED
        else:  # the body has not arrived yet
            self._status(connection, stream, DEADLINE_EXCEEDED, "the deadline passed")

    def _error(self, connection: Http2Connection, stream: Stream, error: InferplexError) -> None:
        self._status(connection, stream, GRPC_STATUS[error.code].value[0], error.message)

    @staticmethod
    def _status(connection: Http2Connection, stream: Stream, code: int, message: str) -> None:
        """A 'trailers-only' response: the status in the one header block."""
        block = _OK_HEAD + literal_header_block(
            [(b"grpc-status", str(code).encode()), (b"grpc-message", percent_encode(message))]
        )
        connection.respond_headers_only(stream, block)


def _http_error(connection: Http2Connection, stream: Stream, status: bytes) -> None:
    connection.respond_headers_only(
        stream, literal_header_block([(b":status", status), (b"content-length", b"0")])
    )


def _cancel_deadline(state: _CallState) -> None:
    if state.deadline is not None:
        state.deadline.cancel()
        state.deadline = None
