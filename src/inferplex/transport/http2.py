"""Server side of HTTP/2 (RFC 9113) for the built-in gRPC server: streams and flow control
over one asyncio transport per connection (frames and HPACK are in transport/http2_wire.py,
shared with the load generator's client; sending, closing, timers and budgets in
http2_send.py; the limits in http2_limits.py).

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

Flow control is deadlock-free by construction; these invariants hold (http2_flow.py keeps
them, the unit tests and scripts/fuzz_http2.py check them):

1. Every flow-controlled byte read is, by the end of its DATA frame, counted in the buffering
   limits (in room reserved for its message, or held as it came) or dropped, and the
   connection window gets it back then. The connection window therefore never waits on a
   stream: no stream can hold back another through it.
2. A stream's window opens past its initial one (every stream's share of the connection's
   buffer limit, ``initial_stream_window``) only for bytes that have room: the rest of a
   message with room reserved for it (opened at once, to all of it), bytes a streaming call's
   application took, and the rest of the streaming message being read. What waits for room
   is held back by its own window, which costs no other stream anything.
3. A message that does not fit waits for room, in order, and is given it as the connection's
   reservations end. It waits only on those reservations, whose windows are open for all
   they still need (invariant 2) over a connection window that never closes on them
   (invariant 1): they end as fast as their peer sends, so every wait ends. Room that cannot
   come from this connection (the server-wide budget is spent and the connection reserves
   nothing, or the message is larger than the budget) is refused at once, on the stream
   alone (RESOURCE_EXHAUSTED naming the limit); the connection and its other streams go on.

Bytes one connection holds are thus at most its buffer limit in reservations (one message
alone may take more, up to the message limit) plus its open streams' initial windows. A peer
sending past a window is a FLOW_CONTROL_ERROR.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from inferplex.transport.http2_flow import CONNECTION_WINDOW, HALF_WINDOW, STREAM_WINDOW
from inferplex.transport.http2_frames import Http2Frames
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_stream import Http2App, Stream
from inferplex.transport.http2_wire import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_HEADER,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RST_STREAM,
    SETTING,
    SETTINGS,
    STREAM_CLOSED,
    U32,
    WINDOW_UPDATE,
    Http2Error,
    frame,
    unpad,
)

__all__ = [
    "CONNECTION_WINDOW",
    "READ_BUFFER",
    "RECEIVE_FRAME_SIZE",
    "STREAM_WINDOW",
    "Http2App",
    "Http2Connection",
    "Stream",
]

# Bound here, not used under their imported names: CPython compiles a method call on an
# imported name as an attribute load, which allocates a bound method on every call.
_FRAME_HEADER, _SETTING, _U32 = FRAME_HEADER, SETTING, U32

#: the largest frame we accept
RECEIVE_FRAME_SIZE = 1 << 20
#: the connection's read buffer: frame headers, frames other than DATA and whatever arrives
#: with them (a frame larger than this that must be whole, such as a header block, grows it
#: until it has been read)
READ_BUFFER = 64 << 10
#: the least room the connection's buffer offers a read after bytes not handled yet
_MIN_READ = 4096


class Http2Connection(Http2Frames):
    """One client connection."""

    def __init__(
        self,
        app: Http2App[Http2Connection],
        connections: set[Http2Connection],
        *,
        max_body_bytes: int,
        max_header_block_bytes: int,
        read_buffer: memoryview | None = None,
        limits: Http2Limits | None = None,
        counters: Http2Counters | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """``read_buffer``: where reads land, shared by the server's connections (each read
        is handled before the next, and what a connection has not handled yet moves to a
        buffer of its own), so an idle connection holds none; None: one of its own.
        ``counters`` are shared by the server's connections; ``loop`` is the running one
        unless given (tests drive a connection by hand)."""
        super().__init__(
            app,
            connections,  # type: ignore[arg-type]
            limits or Http2Limits(),
            counters or Http2Counters(),
            loop,
        )
        self._init_frames(max_header_block_bytes)
        self._max_body = max_body_bytes
        self._shared = memoryview(bytearray(READ_BUFFER)) if read_buffer is None else read_buffer
        # bytes read and not handled yet are _view[_start:_end]
        self._view = self._shared
        self._start = 0
        self._end = 0
        self._wanted = len(PREFACE)  # bytes from _start needed before anything can be done
        self._preface_seen = False
        # the DATA frame whose payload is being read: its stream (_data_stream, None: the
        # payload is dropped), flags, length, the payload bytes still to come, those of them
        # kept as they came (not in a sized buffer), and whether the last get_buffer handed
        # out the stream's own buffer for them
        self._data_flags = 0
        self._data_length = 0
        self._data_left = 0
        self._data_kept = 0
        self._direct = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        settings = b"".join(
            _SETTING.pack(key, value)
            for key, value in (
                (MAX_CONCURRENT_STREAMS, self._limits.max_concurrent_streams),
                (INITIAL_WINDOW_SIZE, self.flow.stream_window),
                (MAX_FRAME_SIZE, RECEIVE_FRAME_SIZE),
                (MAX_HEADER_LIST_SIZE, self._max_block),
                (ENABLE_PUSH, 0),
            )
        )
        self._write(
            frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _U32.pack(CONNECTION_WINDOW - DEFAULT_WINDOW))
        )

    def get_buffer(self, sizehint: int) -> memoryview:
        left = self._data_left
        if left and not self._closed:  # a DATA payload is being read (all before it handled)
            stream = self._data_stream
            if stream is not None and stream.buffer is not None and not stream.discard:
                filled = stream.filled
                room = len(stream.buffer) - filled
                if room:  # straight into place, and nothing past this payload
                    self._direct = True
                    return stream.buffer[filled : filled + min(left, room)]
        self._direct = False
        start, end, view = self._start, self._end, self._view
        if start == end or self._closed:  # all handled (or to drop): the shared buffer
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
        self._reads += 1
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
        if self._end - self._start >= self._wanted or not self._settings_seen:
            self._handle()
        if self._view is self._shared and self._start < self._end and not self._closed:
            # the next read of any connection overwrites the shared buffer
            self._keep(self._view[self._start : self._end].tobytes())

    def _handle(self) -> None:
        """Handle what the buffer holds: the preface and the first SETTINGS, then every
        frame it completes."""
        start = self._start
        try:
            if not self._settings_seen:
                start = self._preface(start)
                if not self._settings_seen:
                    self._start = start
                    return
            self._start = self._frames(start)
        except Http2Error as exc:
            self._fail(exc.code, exc.message)

    def _preface(self, start: int) -> int:
        """The client's preface, then the header of its first frame, which must be a
        SETTINGS frame (RFC 9113 3.4); returns where the frames begin."""
        if not self._preface_seen:
            have = min(self._end - start, len(PREFACE))
            if self._view[start : start + have] != PREFACE[:have]:
                raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
            if have < len(PREFACE):
                return start
            start += len(PREFACE)
            self._preface_seen = True
            self._wanted = 9
        if self._end - start < 9:
            return start
        kind, flags = self._view[start + 3], self._view[start + 4]
        if kind != SETTINGS or flags & ACK:
            raise Http2Error(PROTOCOL_ERROR, "the first frame of a connection must be SETTINGS")
        self._settings_seen = True
        if self._loop is not None:
            self._check(self._loop.time())  # the timers of a connection that has begun
        return start

    def _frames(self, offset: int) -> int:
        """Handle what the buffer holds from ``offset`` on; returns where the rest begins."""
        view = self._view
        size = self._end
        self._wanted = 9
        while not self._closed:
            if self._data_left:  # a DATA payload, as much of it as is here
                moved = self._payload(offset, size)
                if moved == offset:
                    self._wanted = 1
                    break
                offset = moved
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

    def _payload(self, offset: int, size: int) -> int:
        """The part of a DATA frame's payload the buffer holds from ``offset`` (up to
        ``size``); returns where the rest begins (``offset``: none of it is here yet)."""
        left = self._data_left
        count = min(size - offset, left)
        if not count:
            return offset
        if self._data_stream is not None:
            last = count == left and bool(self._data_flags & END_STREAM)
            self._body_chunk(self._data_stream, self._view[offset : offset + count], last)
        self._data_left = left - count
        if count == left:
            self._data_end()
        return offset + count

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        """A whole frame other than an unpadded DATA one: to its handler."""
        if self._cont_id and kind != CONTINUATION:
            raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted by another frame")
        handler = _FRAME_HANDLERS.get(kind)
        if handler is None:  # frames of unknown types are ignored (RFC 9113 4.1), within the budget
            self._spend_control()
        else:
            handler(self, flags, stream_id, payload)

    def _on_goaway(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise Http2Error(FRAME_SIZE_ERROR, "a GOAWAY shorter than 8 bytes")
        self._spend_control()
        self._peer_leaving = True  # no new streams: finish the rest, then close
        self._close_if_done()

    def _on_push_promise(self, flags: int, stream_id: int, payload: bytes) -> None:
        raise Http2Error(PROTOCOL_ERROR, "a client may not send PUSH_PROMISE")

    # -- DATA -------------------------------------------------------------------------------
    def _on_padded_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        """A padded DATA frame, read whole (unpadded ones are read as they come: _frames)."""
        self._data_begin(flags, stream_id, len(payload))
        data = unpad(payload)
        if self._data_stream is not None and data:
            self._body_chunk(self._data_stream, data, bool(flags & END_STREAM))
        self._data_end()

    def _data_begin(self, flags: int, stream_id: int, length: int) -> None:
        """A DATA frame's header: which stream its payload is for (None: dropped)."""
        if self._cont_id:
            raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted by another frame")
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "DATA on stream 0")
        receive = self.flow
        window = receive.recv_window - length
        if window < 0:
            self._counters.exceeded["flow_control"] += 1
            raise Http2Error(FLOW_CONTROL_ERROR, "DATA past the connection's window")
        receive.recv_window = window
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            if stream_id not in self._early_closed:  # the peer ended or reset it itself
                raise Http2Error(STREAM_CLOSED, f"DATA on closed stream {stream_id}")
            # a stream we closed or reset: frames still in flight are dropped
        elif stream.remote_closed:
            self._reset(stream, STREAM_CLOSED)
            self._spend_reset()
            stream = None
        else:
            window = stream.recv_window - length
            if window < 0:
                self._counters.exceeded["flow_control"] += 1
                self._reset(stream, FLOW_CONTROL_ERROR)
                self._spend_reset()
                stream = None
            else:
                stream.recv_window = window
        if not length and not flags & END_STREAM:
            self._spend_control()
        self._data_stream = stream
        self._data_flags = flags
        self._data_length = length
        self._data_kept = 0

    def _body_chunk(self, stream: Stream, chunk: memoryview | bytes, last: bool) -> None:
        """The next bytes of ``stream``'s body (``last``: they end it): to its head, its
        sized buffer or its list."""
        if stream.discard:
            return
        if len(stream.head) < stream.head_size:
            rest = self._body_head(stream, chunk, last)
            if not rest:
                return
            chunk = rest
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
        if not last:  # (the last bytes are the application's at once: _data_end)
            if not self.flow.hold(stream, count):
                return
            stream.unsized += count
            self._data_kept += count
        stream.body.append(bytes(chunk))
        stream.body_bytes += count
        if stream.body_bytes > (stream.limit or self._max_body):
            stream.discard = True
            stream.body.clear()
            self.flow.release(stream)
            self._app.body_too_large(self, stream)

    def _body_head(
        self, stream: Stream, chunk: memoryview | bytes, last: bool
    ) -> memoryview | bytes | None:
        """The bytes of ``chunk`` that complete the head of ``stream``'s body (the size
        the application reads from it); returns the rest of ``chunk`` (None or empty:
        nothing more for the body now)."""
        piece = bytes(chunk[: stream.head_size - len(stream.head)])
        stream.head += piece
        stream.body_bytes += len(piece)
        if len(stream.head) < stream.head_size:
            return None
        size = self._app.body_head_received(self, stream, stream.head)
        if stream.discard:
            return None
        chunk = chunk[len(piece) :]
        # a body here whole (a small message) is one piece already: no buffer to size
        if (
            size is not None
            and 0 <= size <= self._max_body - stream.body_bytes
            and not (last and len(chunk) == size)
        ):
            # room for the rest: a buffer the application sized, counted whole from now on;
            # or, while the stream waits for room, what comes is collected as it comes, each
            # byte counted (``_hold``)
            self.flow.admit(stream, size)
            if stream.discard:
                return None
        return chunk

    def _data_end(self) -> None:
        """A DATA frame has been read: flow control, and the body's end if the frame says so."""
        stream, self._data_stream = self._data_stream, None
        length = self._data_length  # padding counts against the windows too
        # every byte of it is counted in the buffers or dropped by now: the connection window
        # gets it back (invariant 1; inline, as ReceiveFlow.ack: this runs per DATA frame)
        receive = self.flow
        unacked = receive.unacked + length
        if unacked < HALF_WINDOW:
            receive.unacked = unacked
        else:
            receive.ack(length)
        if stream is None or self.streams.get(stream.id) is not stream:
            return  # not for a stream, or it was answered or reset meanwhile
        if self._data_flags & END_STREAM:
            stream.remote_closed = True
            if not stream.discard:
                self._hand_over(stream)
            return
        if stream.reserved:  # its window opens for the rest of its message (invariant 2)
            receive.open(stream, stream.head_size + stream.reserved - stream.body_bytes)
        elif self._data_kept:  # a body arriving in several frames: a streaming call reads
            self._app.data_received(self, stream)  # it as it comes


#: the handler of each frame type that is read whole (unknown types: none, ignored); plain
#: functions, so that a dispatch allocates no bound method
_FRAME_HANDLERS: dict[int, Callable[[Http2Connection, int, int, bytes], None]] = {
    DATA: Http2Connection._on_padded_data,
    HEADERS: Http2Connection._on_headers,
    WINDOW_UPDATE: Http2Connection._on_window_update,
    PING: Http2Connection._on_ping,
    SETTINGS: Http2Connection._on_settings,
    RST_STREAM: Http2Connection._on_rst_stream,
    CONTINUATION: Http2Connection._on_continuation,
    GOAWAY: Http2Connection._on_goaway,
    PRIORITY: Http2Connection._on_priority,
    PUSH_PROMISE: Http2Connection._on_push_promise,
}
