"""A lean gRPC client for the load loops: unary calls over one raw HTTP/2 connection.

grpc.aio spends about 400 µs of client CPU on a 600 kB ``ModelInfer`` (thread hand-offs,
futexes, copies); on a machine shared with the server that CPU is taken from the server.
This client is a bare asyncio protocol, as ``HttpConnection`` is: a call's header block and
length-prefixed message are encoded once (:meth:`GrpcConnection.request`); each call then
writes HEADERS and DATA frames in one transport write where the flow-control windows allow,
and the answer comes back as the message bytes.

What unary calls need of RFC 9113 and gRPC's PROTOCOL-HTTP2, for any conforming server:
many streams in flight (up to the server's SETTINGS_MAX_CONCURRENT_STREAMS; the rest wait
in a queue), flow control both ways, SETTINGS and PING acknowledged, HPACK-decoded answers
(CONTINUATION included), trailers-only answers, RST_STREAM and GOAWAY. Left out: TLS,
compression, deadlines, streaming RPCs and server push (refused in our SETTINGS).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import cast

from inferplex.transport.http2_wire import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_HEADER,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    U32,
    WINDOW_UPDATE,
    HeaderDecoder,
    Headers,
    Http2Error,
    frame,
    header_fragment,
    unpad,
    window_increment,
)
from inferplex_tools.benchtool.clients import ConnectionClosed, RequestFailed
from inferplex_tools.benchtool.grpc_answers import (
    Continuation,
    answer_of,
    failed,
    header_value,
    http_failure,
    reset_failure,
)
from inferplex_tools.benchtool.grpc_calls import CallStream, PreparedCall, Queued, Waiter, prepare
from inferplex_tools.benchtool.grpc_control import (
    RECEIVE_FRAME_SIZE,
    ServerSettings,
    client_preface,
    goaway,
    read_goaway,
)

__all__ = ["GrpcConnection", "PreparedCall"]

#: our receive window, for the connection and for each stream (given back once half is used)
RECEIVE_WINDOW = 16 << 20
#: the largest header list an answer may decode to (hpack's default)
MAX_HEADER_LIST_BYTES = 1 << 16

# Bound here, not used under their imported names: CPython compiles a method call on an
# imported name as an attribute load, which allocates a bound method on every call.
_FRAME_HEADER, _U32 = FRAME_HEADER, U32


class GrpcConnection(asyncio.Protocol):
    """One HTTP/2 connection carrying unary gRPC calls of pre-encoded requests."""

    def __init__(self, authority: str, receive_window: int = RECEIVE_WINDOW) -> None:
        if not DEFAULT_WINDOW <= receive_window <= MAX_WINDOW:
            raise ValueError(f"receive_window must be in [65535, 2^31-1], got {receive_window}")
        self._authority = authority.encode()
        self._window = receive_window
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop  # set with the transport
        self._buffer = bytearray()  # an incomplete frame
        self._wanted = 9  # bytes the buffer must hold before its frame can be complete
        self._out: list[bytes | memoryview] = []  # frames to write at the end of a read
        self._decoder = HeaderDecoder(MAX_HEADER_LIST_BYTES)
        self._continuation: Continuation | None = None
        self._streams: dict[int, CallStream] = {}
        self._queue: deque[Queued] = deque()
        self._blocked: dict[int, CallStream] = {}  # streams waiting for send window
        self._next_id = 1
        self._unacked = 0  # DATA received on the connection, not yet given back
        # the server's settings, and the connection's send window
        self._peer = ServerSettings()
        self._send_window = DEFAULT_WINDOW
        self._closing: str | None = None  # why no new call may start

    @classmethod
    async def open(
        cls, host: str, port: int, authority: str | None = None, *, receive_window: int = 0
    ) -> GrpcConnection:
        """Connect (plain TCP) and send the connection preface; calls may start at once.
        ``authority`` defaults to host:port, ``receive_window`` (0) to RECEIVE_WINDOW."""
        if authority is None:
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        name, window = authority, receive_window or RECEIVE_WINDOW
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(lambda: cls(name, window), host, port)
        return connection

    # -- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self._transport = cast(asyncio.Transport, transport)
        self._loop = asyncio.get_running_loop()
        self._transport.write(client_preface(self._window))

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._closing or f"the server closed the connection ({exc})"
        self._closing = reason
        self._transport = None
        streams, self._streams = self._streams, {}
        self._blocked.clear()
        for stream in streams.values():
            if not stream.future.done():
                stream.future.set_exception(ConnectionClosed(reason))
        self._fail_queued(reason)

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # we closed it: every call still pending fails in connection_lost
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._wanted:
                return
            data = bytes(buffer)
            buffer.clear()
        # DATA payloads are kept as views of ``data``: an answer is copied once, when joined
        try:
            offset = self._frames(data)
        except Http2Error as exc:
            self._fail(exc.code, exc.message)
            return
        if offset < len(data):
            buffer += memoryview(data)[offset:]
        self._flush()

    # -- calls ------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        """False once either side closed the connection or the server sent GOAWAY."""
        transport = self._transport
        return self._closing is None and transport is not None and not transport.is_closing()

    def request(self, path: str, message: bytes) -> PreparedCall:
        """Encode a call of method ``path`` (``/package.Service/Method``) with ``message``
        (a serialised protobuf) once, to be sent by :meth:`call` any number of times."""
        return prepare(self._authority, path, message)

    async def call(self, prepared: PreparedCall) -> bytes:
        """Make the call; returns the answer's message (RequestFailed unless grpc-status 0,
        ConnectionClosed if the connection ends or the server goes away first)."""
        if self._closing is not None or self._transport is None:
            raise ConnectionClosed(self._closing or "not connected")
        future: Waiter = self._loop.create_future()
        if self._queue or len(self._streams) >= self._peer.max_streams:
            self._queue.append(Queued(prepared, future, 0))
            self._start_queued()  # a slot may be free: the queue may hold cancelled calls
        else:
            self._start(prepared, future, 0)
        self._flush()
        try:
            return await future
        except asyncio.CancelledError:
            self._cancel(future)
            raise

    def close(self) -> None:
        if self._transport is not None:
            self._closing = self._closing or "the connection was closed"
            self._transport.close()

    # -- sending ----------------------------------------------------------------------------
    def _start(self, prepared: PreparedCall, future: Waiter, refusals: int) -> None:
        stream_id = self._next_id
        if stream_id > MAX_WINDOW:  # stream ids are used up: a new connection is needed
            self._closing = "the connection has used up its stream ids"
            future.set_exception(ConnectionClosed(self._closing))
            return
        self._next_id = stream_id + 2
        stream = CallStream(stream_id, prepared, future, self._peer.window, refusals)
        self._streams[stream_id] = stream
        self._out.append(frame(HEADERS, END_HEADERS, stream_id, prepared.block))
        self._send_body(stream)

    def _send_body(self, stream: CallStream) -> None:
        """Queue the DATA frames the windows allow; END_STREAM goes on the last."""
        outbox = stream.outbox
        assert outbox is not None
        out = self._out
        limit = self._peer.frame_size
        stream_id = stream.id
        while True:
            size = len(outbox)
            allowed = min(size, limit, stream.window, self._send_window)
            if allowed >= size:
                out.append(
                    _FRAME_HEADER.pack(size >> 16, size & 0xFFFF, DATA, END_STREAM, stream_id)
                )
                out.append(outbox)
                stream.window -= size
                self._send_window -= size
                stream.outbox = None
                self._blocked.pop(stream_id, None)
                return
            if allowed <= 0:
                stream.outbox = outbox
                self._blocked[stream_id] = stream
                return
            out.append(_FRAME_HEADER.pack(allowed >> 16, allowed & 0xFFFF, DATA, 0, stream_id))
            out.append(outbox[:allowed])
            outbox = outbox[allowed:]
            stream.window -= allowed
            self._send_window -= allowed

    def _flush_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                return
            if stream.window > 0:
                self._send_body(stream)

    def _start_queued(self) -> None:
        queue = self._queue
        while queue and len(self._streams) < self._peer.max_streams and self._closing is None:
            call = queue.popleft()
            if not call.future.done():  # a cancelled call is dropped
                self._start(call.prepared, call.future, call.refusals)

    def _flush(self) -> None:
        if self._out:
            out, self._out = self._out, []
            if self._transport is not None and not self._transport.is_closing():
                self._transport.writelines(out)

    # -- receiving --------------------------------------------------------------------------
    def _frames(self, data: bytes) -> int:
        """Handle the complete frames in ``data``; returns where the rest begins."""
        view = memoryview(data)
        offset = 0
        size = len(data)
        self._wanted = 9
        while size - offset >= 9 and self._transport is not None:
            high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(data, offset)
            length = (high << 16) | low
            if length > RECEIVE_FRAME_SIZE:
                raise Http2Error(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            end = offset + 9 + length
            if end > size:
                self._wanted = 9 + length
                break
            stream_id &= MAX_WINDOW
            if self._continuation is not None and kind != CONTINUATION:
                raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted")
            if kind == DATA:
                self._on_data(flags, stream_id, view[offset + 9 : end])
            else:
                # PRIORITY and frames of unknown types are ignored (RFC 9113 4.1, 5.3.2)
                handler = _FRAME_HANDLERS.get(kind)
                if handler is not None:
                    handler(self, flags, stream_id, data[offset + 9 : end])
            offset = end
        return offset

    def _on_data(self, flags: int, stream_id: int, payload: memoryview) -> None:
        if stream_id == 0 or stream_id >= self._next_id:
            raise Http2Error(PROTOCOL_ERROR, f"DATA on stream {stream_id}")
        flow = len(payload)  # padding counts against the windows too
        self._unacked += flow
        if self._unacked >= self._window >> 1:
            self._give_back_connection_window()
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # a stream we reset or gave up: what was in flight is dropped
        if flags & PADDED:
            payload = unpad(payload)
        if not stream.head:
            self._end(stream, failed("INTERNAL", "DATA before the headers"), PROTOCOL_ERROR)
            return
        if payload:
            stream.parts.append(payload)
        if flags & END_STREAM:
            self._finish(stream, None)
            return
        stream.unacked += flow
        if stream.unacked >= self._window >> 1:
            if stream.unacked > self._window:
                raise Http2Error(FLOW_CONTROL_ERROR, "DATA beyond the stream window")
            self._out.append(frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.unacked)))
            stream.unacked = 0

    def _give_back_connection_window(self) -> None:
        """Half our connection window is used: give it back (WINDOW_UPDATE)."""
        if self._unacked > self._window:
            raise Http2Error(FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        self._out.append(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._unacked)))
        self._unacked = 0

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "HEADERS on stream 0")
        payload = header_fragment(flags, payload)
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, payload)
        else:
            self._continuation = Continuation(stream_id, flags, [payload])

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        pending = self._continuation
        if pending is None or pending.stream_id != stream_id:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION of no header block")
        pending.fragments.append(payload)
        if flags & END_HEADERS:
            self._continuation = None
            self._header_block(stream_id, pending.flags, b"".join(pending.fragments))

    def _on_ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id or len(payload) != 8:
            raise Http2Error(PROTOCOL_ERROR, "a malformed PING")
        if not flags & ACK:
            self._out.append(frame(PING, ACK, 0, payload))

    def _on_rst_stream(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or len(payload) != 4:
            raise Http2Error(PROTOCOL_ERROR, "a malformed RST_STREAM")
        self._on_reset(stream_id, _U32.unpack(payload)[0])

    def _on_push_promise(self, flags: int, stream_id: int, payload: bytes) -> None:
        raise Http2Error(PROTOCOL_ERROR, "PUSH_PROMISE, though push is disabled")

    def _header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: it keeps the HPACK state in step
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        ends = flags & END_STREAM
        if not stream.head:
            status = header_value(headers, b":status")
            if status is not None and status[:1] == b"1" and not ends:
                return  # an informational answer: the real one follows
            stream.head = True
            if status != b"200":
                self._end(stream, http_failure(status), NO_ERROR if ends else CANCEL)
                return
            if not ends:
                return
        elif not ends:
            failure = failed("INTERNAL", "a second header block without END_STREAM")
            self._end(stream, failure, PROTOCOL_ERROR)
            return
        self._finish(stream, headers)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            return
        moved = self._peer.apply(payload)
        if moved:
            for stream in self._streams.values():
                stream.window += moved
                if stream.window > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, "a window above 2^31-1")
        self._out.append(frame(SETTINGS, ACK, 0))
        self._flush_blocked()
        self._start_queued()

    def _on_window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        increment = window_increment(stream_id, payload)
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "a connection window above 2^31-1")
            self._flush_blocked()
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.window += increment
        if increment == 0 or stream.window > MAX_WINDOW:
            code = PROTOCOL_ERROR if increment == 0 else FLOW_CONTROL_ERROR
            self._end(stream, failed("INTERNAL", "a bad WINDOW_UPDATE"), code)
        elif stream.outbox is not None:
            self._flush_blocked()

    def _on_reset(self, stream_id: int, code: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if code == REFUSED_STREAM and (again := stream.again()) is not None:
            # not processed (RFC 9113 8.7): send it again once a stream is free
            self._queue.appendleft(again)
            self._end(stream, None, None)
            return
        self._end(stream, reset_failure(code), None)

    def _on_goaway(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "a malformed GOAWAY")
        last_id, code, debug = read_goaway(payload)
        self._closing = f"the server sent GOAWAY (code {code})" + (f": {debug}" if debug else "")
        # streams above last_id were not processed (and are closed): they may be sent again
        for stream in [s for s in self._streams.values() if s.id > last_id]:
            self._end(stream, ConnectionClosed(self._closing), None)
        self._fail_queued(self._closing)
        self._close_if_done()

    # -- ending calls -----------------------------------------------------------------------
    def _finish(self, stream: CallStream, trailers: Headers | None) -> None:
        """The server ended the stream: the answer, or the failure its trailers name."""
        answer = answer_of(trailers, stream.parts)
        # a server may answer before the request is all sent: then our side stops too
        self._end(stream, answer, NO_ERROR if stream.outbox is not None else None)

    def _end(
        self, stream: CallStream, outcome: bytes | RequestFailed | None, reset: int | None
    ) -> None:
        """Close ``stream`` (RST_STREAM ``reset`` unless None) and settle its call with
        ``outcome`` (None: it was queued again)."""
        del self._streams[stream.id]
        if stream.outbox is not None:
            stream.outbox = None
            self._blocked.pop(stream.id, None)
        if reset is not None:
            self._out.append(frame(RST_STREAM, 0, stream.id, _U32.pack(reset)))
        future = stream.future
        if outcome is not None and not future.done():
            if isinstance(outcome, bytes):
                future.set_result(outcome)
            else:
                future.set_exception(outcome)
        self._start_queued()
        self._close_if_done()

    def _cancel(self, future: Waiter) -> None:
        """The caller gave up: a stream it had is reset (a queued call is dropped later)."""
        for stream in self._streams.values():
            if stream.future is future:
                self._end(stream, None, CANCEL)
                self._flush()
                return

    def _fail_queued(self, reason: str) -> None:
        queue, self._queue = self._queue, deque()
        for queued in queue:
            if not queued.future.done():
                queued.future.set_exception(ConnectionClosed(reason))

    def _close_if_done(self) -> None:
        if self._closing is not None and not self._streams and self._transport is not None:
            self._flush()
            self._transport.close()

    def _fail(self, code: int, message: str) -> None:
        """The server broke the protocol: GOAWAY naming why, then close."""
        self._closing = f"HTTP/2 protocol error: {message}"
        self._out.append(goaway(code, message))
        self._flush()
        if self._transport is not None:
            self._transport.close()


#: the handler of each frame type other than DATA (unknown types: none, ignored); plain
#: functions, so that a dispatch allocates no bound method
_FRAME_HANDLERS: dict[int, Callable[[GrpcConnection, int, int, bytes], None]] = {
    HEADERS: GrpcConnection._on_headers,
    CONTINUATION: GrpcConnection._on_continuation,
    WINDOW_UPDATE: GrpcConnection._on_window_update,
    SETTINGS: GrpcConnection._on_settings,
    PING: GrpcConnection._on_ping,
    RST_STREAM: GrpcConnection._on_rst_stream,
    GOAWAY: GrpcConnection._on_goaway,
    PUSH_PROMISE: GrpcConnection._on_push_promise,
}
