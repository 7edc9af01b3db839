"""Frames other than DATA of a server HTTP/2 connection (transport/http2.py): header blocks
(HEADERS, CONTINUATION; requests checked as RFC 9113 section 8 says) and control frames, each
within its limits (http2_limits.py)."""

from __future__ import annotations

from inferplex.transport.http2_base import _DRAIN_PING, _GAPS_KEPT, _KEEPALIVE_PING, _OPEN_REFUND
from inferplex.transport.http2_limits import request_problem, trailers_problem
from inferplex.transport.http2_send import Http2Output
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http2_wire import (
    ACK,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    MAX_FRAME_SIZE_LIMIT,
    MAX_WINDOW,
    MIN_FRAME_SIZE,
    PADDED,
    PING,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RST_STREAM,
    SETTING,
    SETTINGS,
    STREAM_CLOSED,
    U32,
    HeaderDecoder,
    Headers,
    Http2Error,
    frame,
    header_fragment,
    window_increment,
)

_SETTING, _U32 = SETTING, U32

#: settings one SETTINGS frame may carry (nghttp2's limit; each costs a look at every stream)
MAX_SETTINGS = 32


class Http2Frames(Http2Output):
    """Header blocks and control frames of a server connection."""

    def _init_frames(self, max_header_block_bytes: int) -> None:
        self._max_block = max_header_block_bytes
        #: a header block larger than this fails the connection (the decoded list is held
        #: to ``max_header_block_bytes`` by the application, as a stream error)
        self._block_cap = 2 * max_header_block_bytes + MIN_FRAME_SIZE
        self._decoder = HeaderDecoder(2 * max_header_block_bytes + (64 << 10), request_problem)
        # the header block being continued: stream (0: none), flags, fragments, their bytes
        # and frames, and whether its priority named the stream itself
        self._cont_id = 0
        self._cont_flags = 0
        self._cont_parts: list[bytes] = []
        self._cont_bytes = 0
        self._cont_frames = 0
        self._cont_self = False

    def _hand_over(self, stream: Stream) -> None:
        """The request is complete: checked against its content-length, to the application."""
        if stream.length >= 0 and stream.length != stream.body_bytes:
            self._reset(stream, PROTOCOL_ERROR)
            self._spend_reset()
            return
        if stream.held or stream.unsized or self.flow.waiting:  # (a stream may wait holding 0)
            self.flow.handed(stream)
        self._app.body_received(self, stream)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or not stream_id & 1:
            raise Http2Error(PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        itself = False
        if flags & PRIORITY_FLAG:
            at = 1 if flags & PADDED else 0
            itself = (
                len(payload) >= at + 4
                and _U32.unpack_from(payload, at)[0] & (0x7FFFFFFF) == stream_id
            )
        fragment = header_fragment(flags, payload)
        if len(fragment) > self._block_cap:
            self._calm("header_block_bytes", "a header block above the header list limit")
        if flags & END_HEADERS:
            self._header_block(stream_id, flags, fragment, itself)
            return
        if not fragment:
            self._spend_control()
        self._cont_id, self._cont_flags, self._cont_self = stream_id, flags, itself
        self._cont_parts = [fragment]
        self._cont_bytes = len(fragment)
        self._cont_frames = 1

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not self._cont_id or self._cont_id != stream_id:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION without a header block to continue")
        self._cont_frames += 1
        self._cont_bytes += len(payload)
        if self._cont_frames > self._limits.max_header_frames:
            self._calm("header_frames", "a header block in too many frames")
        if self._cont_bytes > self._block_cap:
            self._calm("header_block_bytes", "a header block above the header list limit")
        if not flags & END_HEADERS:
            if not payload:
                self._spend_control()
            self._cont_parts.append(payload)
            return
        parts = self._cont_parts
        parts.append(payload)
        self._cont_id, self._cont_parts = 0, []
        self._header_block(stream_id, self._cont_flags, b"".join(parts), self._cont_self)

    def _header_block(self, stream_id: int, flags: int, block: bytes, itself: bool) -> None:
        # always decoded: it keeps the HPACK state in step
        headers, (problem, length) = self._decoder.decode_checked(block)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers: they end the request, their fields are unused
            self._trailers(stream, flags, headers, itself)
            return
        if stream_id <= self._last_stream_id:
            self._headers_on_old_stream(stream_id)
            return
        if stream_id != self._last_stream_id + 2:  # the ids skipped are closed now
            self._gaps.append((self._last_stream_id + 2, stream_id - 2))
            del self._gaps[:-_GAPS_KEPT]
        self._last_stream_id = stream_id
        if problem is not None or itself:  # a malformed request (RFC 9113 8.1.1)
            self._refuse(stream_id, PROTOCOL_ERROR)
            self._spend_reset()
            return
        if self._goaway_sent or self._peer_leaving:
            self._refuse(stream_id, REFUSED_STREAM)
            return
        if len(self.streams) >= self._limits.max_concurrent_streams:
            # refused, the connection kept (grpc-core retries the call); spent from the resets
            # budget only once the peer has acknowledged the limit: before, an honest burst
            # may pass it (RFC 9113 5.1.2)
            self._counters.exceeded["concurrent_streams"] += 1
            self._refuse(stream_id, REFUSED_STREAM)
            if self._settings_acked:
                self._spend_reset()
            return
        stream = Stream(stream_id, headers, self._peer_window, self.flow.stream_window)
        stream.length = length
        self.streams[stream_id] = stream
        self._earn(_OPEN_REFUND)
        stream.remote_closed = bool(flags & END_STREAM)
        self._app.headers_received(self, stream)
        if stream.remote_closed and not stream.discard:
            self._hand_over(stream)

    def _trailers(self, stream: Stream, flags: int, headers: Headers, itself: bool) -> None:
        """A second header block on an open stream: trailers, which end the request."""
        if stream.remote_closed:
            self._reset(stream, STREAM_CLOSED)
            self._spend_reset()
        elif not flags & END_STREAM:
            raise Http2Error(PROTOCOL_ERROR, "a second header block without END_STREAM")
        elif itself or trailers_problem(headers) is not None:
            self._reset(stream, PROTOCOL_ERROR)
            self._spend_reset()
        else:
            stream.remote_closed = True
            if not stream.discard:
                self._hand_over(stream)

    def _headers_on_old_stream(self, stream_id: int) -> None:
        """HEADERS on a stream id at or below the last one opened, and not open now."""
        if stream_id in self._early_closed:
            return  # a stream we closed or reset: frames still in flight are dropped
        if any(low <= stream_id <= high for low, high in self._gaps):
            raise Http2Error(PROTOCOL_ERROR, f"stream {stream_id} opened out of order")
        raise Http2Error(STREAM_CLOSED, f"HEADERS on closed stream {stream_id}")

    def _refuse(self, stream_id: int, code: int) -> None:
        """A stream that never opened is closed again with RST_STREAM ``code``."""
        self._write(frame(RST_STREAM, 0, stream_id, _U32.pack(code)))
        self._closed_early(stream_id)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            self._spend_control()
            self._settings_acked = True  # (we send one SETTINGS frame: this is its ACK)
            return
        if len(payload) % 6:
            raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS payload not a multiple of 6")
        if len(payload) > 6 * MAX_SETTINGS:
            self._calm("settings_entries", f"more than {MAX_SETTINGS} settings in one frame")
        self._spend_control()
        window = self._apply_settings(payload)
        if window is not None and window != self._peer_window:
            self._set_peer_window(window)
        self._write(frame(SETTINGS, ACK, 0))
        self._flush_blocked()

    def _apply_settings(self, payload: bytes) -> int | None:
        """Check and apply a SETTINGS frame's entries; the initial window it sets, if any
        (applied by the caller once all entries are checked)."""
        window = None
        for key, value in _SETTING.iter_unpack(payload):
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, f"initial window {value}")
                window = value
            elif key == MAX_FRAME_SIZE:
                if not MIN_FRAME_SIZE <= value <= MAX_FRAME_SIZE_LIMIT:
                    raise Http2Error(PROTOCOL_ERROR, f"max frame size {value}")
                self._peer_frame_size = value
            elif key == ENABLE_PUSH and value > 1:
                raise Http2Error(PROTOCOL_ERROR, f"enable push {value}")
        return window

    def _set_peer_window(self, window: int) -> None:
        """The peer's new initial window: every open stream's send window moves with it."""
        delta = window - self._peer_window
        self._peer_window = window
        for stream in self.streams.values():
            stream.send_window += delta
            if stream.send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "a stream window passed 2^31-1")

    def _on_window_update(self, flags: int, stream_id: int, payload: bytes) -> None:
        increment = window_increment(stream_id, payload)
        self._spend_control()
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "the connection window passed 2^31-1")
            self._flush_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return
        if increment == 0:
            self._reset(stream, PROTOCOL_ERROR)
            self._spend_reset()
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream, FLOW_CONTROL_ERROR)
            self._spend_reset()
        elif stream.outbox is not None:
            self._flush_blocked()

    def _on_ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise Http2Error(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise Http2Error(FRAME_SIZE_ERROR, "a PING not of 8 bytes")
        self._spend_control()
        if not flags & ACK:
            self._write(frame(PING, ACK, 0, payload))
        elif payload == _DRAIN_PING and self._draining is not None:
            self._final_goaway()
        elif payload == _KEEPALIVE_PING:
            self._deadlines.ping_sent_at = None

    def _on_rst_stream(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "a RST_STREAM not of 4 bytes")
        if stream_id > self._last_stream_id:
            raise Http2Error(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self.streams.pop(stream_id, None)
        if stream is None:  # closed already (ours crossed it, say)
            self._spend_control()
            return
        # the work it started stops (the application cancels it) and counts for nothing
        self._blocked.pop(stream_id, None)
        stream.discard = True
        self.flow.release(stream)
        if not self.streams and self._loop is not None:
            self._deadlines.idle_since = self._loop.time()
        self._app.stream_reset(stream)
        self._close_if_done()
        self._spend_reset()

    def _on_priority(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "PRIORITY on stream 0")
        self._spend_control()
        code = 0
        if len(payload) != 5:
            code = FRAME_SIZE_ERROR
        elif _U32.unpack_from(payload)[0] & 0x7FFFFFFF == stream_id:
            code = PROTOCOL_ERROR
        if not code:
            return
        stream = self.streams.get(stream_id)
        if stream is None:  # an idle or closed stream cannot be reset: the connection ends
            raise Http2Error(code, "a malformed PRIORITY frame")
        self._reset(stream, code)
        self._spend_reset()
