"""Server side of HTTP/2 (RFC 9113) for the built-in gRPC server: streams and flow control
over one asyncio transport per connection (frames and HPACK are in frontends/http2_wire.py,
shared with the load generator's client).

What a unary RPC server needs and nothing more: requests arrive whole (headers, then a body
collected until END_STREAM), responses leave as a header block, one body and a trailer
block, in as few socket writes as the peer's flow-control windows allow (one, usually).
Server push, priorities and our own HPACK dynamic table are left out: responses are encoded
with literals that never index, which every decoder accepts.

The application (``Http2App``) is told when a stream's headers are complete (it may answer
at once and ignore the body), when its body is complete, and when the peer reset it. It may
also ask to see the first bytes of a body (``Stream.head_size``) and answer with the size of
the rest (gRPC's 5-byte prefix announces its message's length): the rest is then read into
one buffer of that size, and DATA payloads go from the socket straight into it (the protocol
is a ``BufferedProtocol``: ``get_buffer`` hands out that buffer while a payload for it is
being read). Frame headers, other frames and payload bytes that arrive with them are read
into the connection's own buffer and copied once to where they belong. A large body is thus
copied once, by the kernel, rather than once per read, per frame and when it is joined.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from inferplex.frontends.buffers import uninitialised
from inferplex.frontends.http2_wire import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_HEADER,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_FRAME_SIZE_LIMIT,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    MIN_FRAME_SIZE,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTING,
    SETTINGS,
    STREAM_CLOSED,
    U32,
    WINDOW_UPDATE,
    HeaderDecoder,
    Http2Error,
    frame,
    header_fragment,
    unpad,
    window_increment,
)

__all__ = ["READ_BUFFER", "Http2App", "Http2Connection", "Stream"]

logger = logging.getLogger(__name__)

# Bound here, not used under their imported names: CPython compiles a method call on an
# imported name as an attribute load, which allocates a bound method on every call.
_FRAME_HEADER, _SETTING, _U32 = FRAME_HEADER, SETTING, U32

#: our receive windows: a stream may send this much before we ask for more; the
#: connection as a whole this much (both replenished once half is consumed)
STREAM_WINDOW = 1 << 20
CONNECTION_WINDOW = 16 << 20
#: the largest frame we accept
RECEIVE_FRAME_SIZE = 1 << 20
#: the connection's read buffer: frame headers, frames other than DATA and whatever arrives
#: with them (a frame larger than this that must be whole, such as a header block, grows it
#: until it has been read)
READ_BUFFER = 64 << 10
#: bytes the sized body buffers of one connection may wait for (``_reservable``)
RESERVE_BYTES = 64 << 20
#: the least room the connection's buffer offers a read after bytes not handled yet
_MIN_READ = 4096
#: the PING of a graceful close, and how long its ACK is awaited
_DRAIN_PING = b"draining"
DRAIN_PING_TIMEOUT_S = 1.0
#: streams one connection may have open at once (more are refused with REFUSED_STREAM)
MAX_STREAMS = 1024


class Stream:
    """One request/response exchange."""

    __slots__ = (
        "body",
        "body_bytes",
        "buffer",
        "context",
        "discard",
        "filled",
        "head",
        "head_size",
        "headers",
        "id",
        "outbox",
        "remote_closed",
        "send_window",
        "task",
        "trailers",
        "unacked",
    )

    def __init__(self, stream_id: int, headers: list[tuple[bytes, bytes]], window: int) -> None:
        self.id = stream_id
        self.headers = headers
        #: the body is ``head``, then ``buffer[:filled]``, then the bytes in ``body``
        self.body_bytes = 0
        #: set by the application when the headers arrive: the body's first bytes it wants to
        #: see (Http2App.body_head_received) before the rest arrives; 0: it does not ask
        self.head_size = 0
        self.head = b""
        self.buffer: memoryview | None = None  # the rest, where the application sized it
        self.filled = 0
        self.body: list[bytes] = []  # the rest as it came, where it was not sized (or larger)
        self.remote_closed = False  # the peer sent END_STREAM
        self.discard = False  # answered early: the body is not wanted
        self.send_window = window
        self.unacked = 0  # body bytes received since our last WINDOW_UPDATE for it
        self.outbox: memoryview | None = None  # response body not sent yet (flow control)
        self.trailers = b""  # sent once the outbox is empty
        self.task: asyncio.Task[None] | None = None  # the application's, while it runs
        self.context: object = None  # the application's per-stream state

    def data(self, skip: int = 0) -> bytes | memoryview:
        """The body from byte ``skip`` on: the sized buffer itself, or the one piece, when
        that is all of it after the head (no copy), else copied at most once."""
        head, buffer, body = self.head, self.buffer, self.body
        if skip == len(head):
            if buffer is not None and not body and self.filled == len(buffer):
                return buffer
            if buffer is None and len(body) == 1:
                return body[0]
        parts: list[bytes | memoryview] = [head] if head else []
        if buffer is not None:
            parts.append(buffer[: self.filled])
        parts += body
        if len(parts) == 1 and not skip and isinstance(parts[0], bytes):
            return parts[0]
        if parts and len(parts[0]) >= skip:
            parts[0] = memoryview(parts[0])[skip:]
            return b"".join(parts)
        return b"".join(parts)[skip:]


class Http2App(Protocol):
    """What a connection tells its application."""

    def headers_received(self, connection: Http2Connection, stream: Stream) -> None:
        """A new stream's header block is complete (the body may follow)."""

    def body_head_received(
        self, connection: Http2Connection, stream: Stream, head: bytes
    ) -> int | None:
        """The first ``stream.head_size`` bytes of the body (``head``) have arrived: how many
        bytes follow them, if the application knows. They are then read into one buffer of
        that size, which ``stream.data(len(head))`` returns without a copy. None: the rest is
        collected as it comes. The application may answer the stream here instead."""

    def body_received(self, connection: Http2Connection, stream: Stream) -> None:
        """The stream's body is complete (the peer ended its side)."""

    def body_too_large(self, connection: Http2Connection, stream: Stream) -> None:
        """The body passed ``max_body_bytes``; what arrived is dropped."""

    def stream_reset(self, stream: Stream) -> None:
        """The peer reset the stream (or the connection is gone) before it was answered."""


class Http2Connection(asyncio.BufferedProtocol):
    """One client connection."""

    def __init__(
        self,
        app: Http2App,
        connections: set[Http2Connection],
        *,
        max_body_bytes: int,
        max_header_block_bytes: int,
        read_buffer: memoryview | None = None,
    ) -> None:
        """``read_buffer``: where reads land, shared by the server's connections (each read
        is handled before the next, and what a connection has not handled yet moves to a
        buffer of its own), so an idle connection holds none; None: one of its own."""
        self._app = app
        self._connections = connections
        self._max_body = max_body_bytes
        self._max_block = max_header_block_bytes
        self._transport: asyncio.Transport | None = None
        self._shared = memoryview(bytearray(READ_BUFFER)) if read_buffer is None else read_buffer
        # bytes read and not handled yet are _view[_start:_end]
        self._view = self._shared
        self._start = 0
        self._end = 0
        self._wanted = len(PREFACE)  # bytes from _start needed before anything can be done
        self._preface_seen = False
        # the DATA frame whose payload is being read: its stream (None: the payload is
        # dropped), flags, length, the payload bytes still to come, and whether the last
        # get_buffer handed out the stream's own buffer for them
        self._data_stream: Stream | None = None
        self._data_flags = 0
        self._data_length = 0
        self._data_left = 0
        self._direct = False
        self._decoder = HeaderDecoder(2 * max_header_block_bytes + (64 << 10))
        self.streams: dict[int, Stream] = {}
        self._last_stream_id = 0
        self._continuation: tuple[int, int, list[bytes]] | None = None  # id, flags, fragments
        # sending
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame_size = MIN_FRAME_SIZE
        self._blocked: dict[int, Stream] = {}  # streams waiting for window
        # receiving
        self._unacked = 0
        self._draining: asyncio.TimerHandle | None = None  # first GOAWAY sent, final pending
        self._goaway_sent = False
        self._peer_leaving = False
        self._write_closed = False  # our FIN is sent
        self._closed = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses
        self._connections.add(self)
        settings = b"".join(
            _SETTING.pack(key, value)
            for key, value in (
                (MAX_CONCURRENT_STREAMS, MAX_STREAMS),
                (INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (MAX_FRAME_SIZE, RECEIVE_FRAME_SIZE),
                (MAX_HEADER_LIST_SIZE, self._max_block),
                (ENABLE_PUSH, 0),
            )
        )
        self._write(
            frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _U32.pack(CONNECTION_WINDOW - DEFAULT_WINDOW))
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._draining is not None:
            self._draining.cancel()
        self._connections.discard(self)
        streams, self.streams = self.streams, {}
        self._blocked.clear()
        for stream in streams.values():
            self._app.stream_reset(stream)

    def pause_writing(self) -> None:
        # the peer is not reading: stop taking requests until the socket drains
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        left = self._data_left
        if left:  # a DATA payload is being read (and all that came before it is handled)
            stream = self._data_stream
            if stream is not None and stream.buffer is not None and not stream.discard:
                filled = stream.filled
                room = len(stream.buffer) - filled
                if room:  # straight into place, and nothing past this payload
                    self._direct = True
                    return stream.buffer[filled : filled + min(left, room)]
        self._direct = False
        start, end, view = self._start, self._end, self._view
        if start == end:  # all handled: back to the shared buffer
            self._view = self._shared
            self._start = self._end = 0
            return self._shared
        if len(view) - end >= _MIN_READ and len(view) - start >= self._wanted:
            return view[end:]
        self._keep(view[start:end].tobytes())
        return self._view[self._end :]

    def _keep(self, pending: bytes) -> None:
        """Move the bytes not handled yet to the front of a buffer of the connection's own,
        with room for the frame they begin."""
        view = self._view
        size = max(self._wanted, len(pending) + _MIN_READ)
        if view is self._shared or len(view) < size:
            view = self._view = memoryview(bytearray(size))
        view[: len(pending)] = pending
        self._start, self._end = 0, len(pending)

    def buffer_updated(self, nbytes: int) -> None:
        if self._closed:
            return
        if self._direct:  # read into the stream's buffer
            self._direct = False
            stream = self._data_stream
            assert stream is not None
            stream.filled += nbytes
            stream.body_bytes += nbytes
            self._data_left -= nbytes
            if not self._data_left:
                self._data_end()
            return
        self._end += nbytes
        if self._end - self._start >= self._wanted or not self._preface_seen:
            self._handle()
        if self._view is self._shared and self._start < self._end:
            # the next read of any connection overwrites the shared buffer
            self._keep(self._view[self._start : self._end].tobytes())

    def _handle(self) -> None:
        """Handle what the buffer holds: the preface, then every frame it completes."""
        start = self._start
        try:
            if not self._preface_seen:
                have = min(self._end - start, len(PREFACE))
                if self._view[start : start + have] != PREFACE[:have]:
                    raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
                if have < len(PREFACE):
                    return
                start += len(PREFACE)
                self._preface_seen = True
            self._start = self._frames(start)
        except Http2Error as exc:
            self._fail(exc.code, exc.message)

    def _frames(self, offset: int) -> int:
        """Handle what the buffer holds from ``offset`` on; returns where the rest begins."""
        view = self._view
        size = self._end
        self._wanted = 9
        while not self._closed:
            left = self._data_left
            if left:  # a DATA payload, as much of it as is here
                count = min(size - offset, left)
                if not count:
                    self._wanted = 1
                    break
                if self._data_stream is not None:
                    last = count == left and bool(self._data_flags & END_STREAM)
                    self._body_chunk(self._data_stream, view[offset : offset + count], last)
                offset += count
                self._data_left = left - count
                if count == left:
                    self._data_end()
                continue
            if size - offset < 9:
                break
            high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(view, offset)
            length = (high << 16) | low
            if length > RECEIVE_FRAME_SIZE:
                raise Http2Error(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
            if kind == DATA and not flags & PADDED:  # read as it comes, not waited for whole
                offset += 9
                self._data_begin(flags, stream_id & 0x7FFFFFFF, length)
                self._data_left = length
                if not length:
                    self._data_end()
                continue
            end = offset + 9 + length
            if end > size:
                self._wanted = 9 + length
                break
            payload = view[offset + 9 : end].tobytes()
            offset = end
            self._frame(kind, flags, stream_id & 0x7FFFFFFF, payload)
        return offset

    # -- receiving --------------------------------------------------------------------------
    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continuation is not None and kind != CONTINUATION:
            raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted by another frame")
        if kind == DATA:  # a padded one: read whole
            self._data_begin(flags, stream_id, len(payload))
            data = unpad(payload)
            if self._data_stream is not None and data:
                self._body_chunk(self._data_stream, data, bool(flags & END_STREAM))
            self._data_end()
        elif kind == HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif kind == WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == PING:
            if len(payload) != 8 or stream_id:
                raise Http2Error(FRAME_SIZE_ERROR if stream_id == 0 else PROTOCOL_ERROR, "PING")
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
            elif payload == _DRAIN_PING and self._draining is not None:
                self._final_goaway()
        elif kind == SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == RST_STREAM:
            if stream_id == 0 or len(payload) != 4:
                raise Http2Error(PROTOCOL_ERROR, "a malformed RST_STREAM frame")
            stream = self.streams.pop(stream_id, None)
            self._blocked.pop(stream_id, None)
            if stream is not None:
                self._app.stream_reset(stream)
                self._close_if_done()
        elif kind == CONTINUATION:
            self._on_continuation(flags, stream_id, payload)
        elif kind == GOAWAY:
            self._peer_leaving = True  # no new streams: finish the rest, then close
            self._close_if_done()
        elif kind == PRIORITY:
            if stream_id == 0 or len(payload) != 5:
                raise Http2Error(PROTOCOL_ERROR, "a malformed PRIORITY frame")
        elif kind == PUSH_PROMISE:
            raise Http2Error(PROTOCOL_ERROR, "a client may not send PUSH_PROMISE")
        # frames of unknown types are ignored (RFC 9113 4.1)

    def _data_begin(self, flags: int, stream_id: int, length: int) -> None:
        """A DATA frame's header: which stream its payload is for (None: dropped)."""
        if self._continuation is not None:
            raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted by another frame")
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "DATA on stream 0")
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            # a stream we closed or reset: frames still in flight are dropped
        elif stream.remote_closed:
            self._reset(stream, STREAM_CLOSED)
            stream = None
        self._data_stream = stream
        self._data_flags = flags
        self._data_length = length

    def _body_chunk(self, stream: Stream, chunk: memoryview | bytes, last: bool) -> None:
        """The next bytes of ``stream``'s body (``last``: they end it): to its head, its
        sized buffer or its list."""
        if stream.discard:
            return
        if len(stream.head) < stream.head_size:
            piece = bytes(chunk[: stream.head_size - len(stream.head)])
            stream.head += piece
            stream.body_bytes += len(piece)
            if len(stream.head) < stream.head_size:
                return
            size = self._app.body_head_received(self, stream, stream.head)
            if stream.discard:
                return
            chunk = chunk[len(piece) :]
            # a body here whole (a small message) is one piece already: no buffer to size
            whole = last and len(chunk) == size
            if (
                size is not None
                and 0 <= size <= self._max_body - stream.body_bytes
                and not whole
                and self._reservable(size)
            ):
                stream.buffer = uninitialised(size)
            if not chunk:
                return
        count = len(chunk)
        buffer = stream.buffer
        if buffer is not None:
            filled = stream.filled
            if count <= len(buffer) - filled:
                buffer[filled : filled + count] = chunk
                stream.filled = filled + count
                stream.body_bytes += count
                return
            # more than the application announced: collected as it comes from here on
            stream.body.append(buffer[:filled].tobytes())
            stream.buffer = None
        stream.body.append(bytes(chunk))
        stream.body_bytes += count
        if stream.body_bytes > self._max_body:
            stream.discard = True
            stream.body.clear()
            self._app.body_too_large(self, stream)

    def _reservable(self, size: int) -> bool:
        """Whether ``size`` bytes may be set aside for a body still to arrive: the sized
        buffers of a connection's streams wait for at most RESERVE_BYTES (or one largest
        body) not received yet, so a client announcing large messages it does not send
        reserves no more; past that, bodies are collected as they come, within the windows."""
        waiting = sum(
            len(s.buffer) - s.filled for s in self.streams.values() if s.buffer is not None
        )
        return waiting + size <= max(RESERVE_BYTES, self._max_body)

    def _data_end(self) -> None:
        """A DATA frame has been read: flow control, and the body's end if the frame says so."""
        stream, self._data_stream = self._data_stream, None
        flow = self._data_length  # padding counts against the windows too
        self._unacked += flow
        if self._unacked >= CONNECTION_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._unacked)))
            self._unacked = 0
        if stream is None or self.streams.get(stream.id) is not stream:
            return  # not for a stream, or it was answered or reset meanwhile
        if self._data_flags & END_STREAM:
            stream.remote_closed = True
            if not stream.discard:
                self._app.body_received(self, stream)
            return
        stream.unacked += flow
        if stream.unacked >= STREAM_WINDOW // 2:
            self._write(frame(WINDOW_UPDATE, 0, stream.id, _U32.pack(stream.unacked)))
            stream.unacked = 0

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or not stream_id & 1:
            raise Http2Error(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        payload = header_fragment(flags, payload)
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, payload)
        else:
            self._continuation = (stream_id, flags, [payload])

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        pending = self._continuation
        if pending is None or pending[0] != stream_id:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION without a header block to continue")
        pending[2].append(payload)
        if sum(len(part) for part in pending[2]) > 2 * self._max_block + MIN_FRAME_SIZE:
            raise Http2Error(ENHANCE_YOUR_CALM, "a header block above the header list limit")
        if flags & END_HEADERS:
            self._continuation = None
            self._header_block(stream_id, pending[1], b"".join(pending[2]))

    def _header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: it keeps the HPACK state in step
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers: they end the request, their fields are unused
            if not flags & END_STREAM or stream.remote_closed:
                raise Http2Error(PROTOCOL_ERROR, "a second header block without END_STREAM")
            stream.remote_closed = True
            if not stream.discard:
                self._app.body_received(self, stream)
            return
        if stream_id <= self._last_stream_id:
            return  # a stream we closed or reset: frames still in flight are dropped
        self._last_stream_id = stream_id
        if self._goaway_sent or self._peer_leaving or len(self.streams) >= MAX_STREAMS:
            self._write(frame(RST_STREAM, 0, stream_id, _U32.pack(REFUSED_STREAM)))
            return
        stream = Stream(stream_id, headers, self._peer_window)
        self.streams[stream_id] = stream
        stream.remote_closed = bool(flags & END_STREAM)
        self._app.headers_received(self, stream)
        if stream.remote_closed and not stream.discard:
            self._app.body_received(self, stream)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS payload not a multiple of 6")
        for key, value in _SETTING.iter_unpack(payload):
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, f"initial window {value}")
                delta = value - self._peer_window
                self._peer_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == MAX_FRAME_SIZE:
                if not MIN_FRAME_SIZE <= value <= MAX_FRAME_SIZE_LIMIT:
                    raise Http2Error(PROTOCOL_ERROR, f"max frame size {value}")
                self._peer_frame_size = value
            elif key == ENABLE_PUSH and value > 1:
                raise Http2Error(PROTOCOL_ERROR, f"enable push {value}")
        self._write(frame(SETTINGS, ACK, 0))
        self._flush_blocked()

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        increment = window_increment(stream_id, payload)
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "the connection window passed 2^31-1")
            self._flush_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if increment == 0:
            self._reset(stream, PROTOCOL_ERROR)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream, FLOW_CONTROL_ERROR)
        elif stream.outbox is not None:
            self._flush_blocked()

    # -- sending ----------------------------------------------------------------------------
    def respond(self, stream: Stream, head: bytes, body: bytes, trailers: bytes) -> None:
        """Answer ``stream``: the ``head`` block, ``body`` as DATA (as the windows allow),
        then the ``trailers`` block, which ends the stream."""
        if self._closed or self.streams.get(stream.id) is not stream:
            return  # reset or gone: nobody is waiting
        parts = self._header_frames(stream.id, head, 0)
        stream.trailers = trailers
        stream.outbox = memoryview(body)
        self._send_body(stream, parts)
        self._write(b"".join(parts))
        if stream.outbox is not None:
            self._blocked[stream.id] = stream

    def respond_headers_only(self, stream: Stream, block: bytes) -> None:
        """Answer ``stream`` with one header block that ends it (a 'trailers-only' gRPC
        response, or an HTTP error status)."""
        stream.discard = True
        if self._closed or self.streams.get(stream.id) is not stream:
            return
        parts = self._header_frames(stream.id, block, END_STREAM)
        self._write(b"".join(parts))
        self._finish(stream)

    def _header_frames(self, stream_id: int, block: bytes, flags: int) -> list[bytes]:
        limit = self._peer_frame_size
        if len(block) <= limit:
            return [frame(HEADERS, flags | END_HEADERS, stream_id, block)]
        chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
        parts = [frame(HEADERS, flags, stream_id, chunks[0])]
        parts += [frame(CONTINUATION, 0, stream_id, chunk) for chunk in chunks[1:-1]]
        parts.append(frame(CONTINUATION, END_HEADERS, stream_id, chunks[-1]))
        return parts

    def _send_body(self, stream: Stream, parts: list[bytes]) -> None:
        """Append to ``parts`` the DATA frames the windows allow, and the trailers once the
        body is all out."""
        outbox = stream.outbox
        assert outbox is not None
        limit = self._peer_frame_size
        while outbox:
            allowed = min(len(outbox), stream.send_window, self._send_window, limit)
            if allowed <= 0:
                stream.outbox = outbox
                return
            parts.append(frame(DATA, 0, stream.id, bytes(outbox[:allowed])))
            outbox = outbox[allowed:]
            stream.send_window -= allowed
            self._send_window -= allowed
        stream.outbox = None
        parts.extend(self._header_frames(stream.id, stream.trailers, END_STREAM))
        self._finish(stream)

    def _flush_blocked(self) -> None:
        if not self._blocked:
            return
        parts: list[bytes] = []
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                break
            if stream.send_window > 0:
                self._send_body(stream, parts)  # a stream sent whole leaves _blocked
        if parts:
            self._write(b"".join(parts))

    def _finish(self, stream: Stream) -> None:
        """Our side is done: the stream closes (a peer still sending is told to stop)."""
        stream.discard = True  # what may still arrive of its body is not wanted
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        if not stream.remote_closed:
            self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
        self._close_if_done()

    def _reset(self, stream: Stream, code: int) -> None:
        stream.discard = True
        self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(code)))
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        self._app.stream_reset(stream)

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._closed and not self._write_closed:
            self._transport.write(data)

    # -- closing ----------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """No open streams, and no graceful close half done."""
        return not self.streams and self._draining is None

    def finish_writing(self) -> None:
        """The server is done with this connection: the final GOAWAY, then our side ends
        (FIN). Reading goes on until the peer closes its side: closing a socket with unread
        data makes the kernel reset the connection and drop what we sent last."""
        self._final_goaway()
        transport = self._transport
        if transport is None or self._closed:
            return
        if transport.can_write_eof():
            transport.write_eof()
            self._write_closed = True
        else:
            transport.close()

    def goaway(self) -> None:
        """Graceful close, in two steps as gRPC servers do: a first GOAWAY naming the
        largest stream id (the peer stops opening streams; those already on their way are
        still served) and a PING; when its ACK (one round trip) or a second has passed, the
        final GOAWAY with the last stream id taken. Open streams finish; the server closes
        the connection (after every connection's streams have finished)."""
        if self._goaway_sent or self._draining is not None:
            return
        self._write(
            frame(GOAWAY, 0, 0, _U32.pack(MAX_WINDOW) + _U32.pack(NO_ERROR))
            + frame(PING, 0, 0, _DRAIN_PING)
        )
        loop = asyncio.get_running_loop()
        self._draining = loop.call_later(DRAIN_PING_TIMEOUT_S, self._final_goaway)

    def _final_goaway(self) -> None:
        if self._draining is not None:
            self._draining.cancel()
            self._draining = None
        if not self._goaway_sent:
            self._goaway_sent = True
            self._write(frame(GOAWAY, 0, 0, _U32.pack(self._last_stream_id) + _U32.pack(0)))
        self._close_if_done()

    def _close_if_done(self) -> None:
        # After our own GOAWAY the connection stays open until the server closes it: a peer
        # that reuses an idle connection before reading the GOAWAY (nginx) would otherwise
        # send its next call into a closing socket.
        if self._peer_leaving and not self.streams and self._transport is not None:
            self._transport.close()

    def _fail(self, code: int, message: str) -> None:
        """A connection error: GOAWAY naming it, then close."""
        logger.debug("HTTP/2 connection error %d: %s", code, message)
        goaway = _U32.pack(self._last_stream_id) + _U32.pack(code) + message.encode()[:256]
        self._write(frame(GOAWAY, 0, 0, goaway))
        self._goaway_sent = True
        self._closed = True  # nothing more is read or written
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
