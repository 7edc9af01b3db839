"""Responses of a server HTTP/2 connection (transport/http2.py): a header block, the body as
DATA frames as the peer's windows allow (what they do not is sent as they open, or dropped
after the send timeout), and a trailer block."""

from __future__ import annotations

from inferplex.transport.http2_base import _STREAM_REFUND, Http2Base
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http2_wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    NO_ERROR,
    RST_STREAM,
    U32,
    frame,
)

_U32 = U32


class Http2Output(Http2Base):
    """The sending half of a server connection."""

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
            if self._limits.send_timeout_s and self._loop is not None:
                stream.stalled_since = now = self._loop.time()
                self._arm(now + self._limits.send_timeout_s)

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
        sent = 0
        while outbox:
            allowed = min(len(outbox), stream.send_window, self._send_window, limit)
            if allowed <= 0:
                stream.outbox = outbox
                break
            parts.append(frame(DATA, 0, stream.id, bytes(outbox[:allowed])))
            outbox = outbox[allowed:]
            stream.send_window -= allowed
            self._send_window -= allowed
            sent += 1
        if self._control:  # DATA sent: the peer's WINDOW_UPDATEs follow
            control = self._control - sent
            self._control = control if control > 0 else 0
        if outbox:
            return
        stream.outbox = None
        parts.extend(self._header_frames(stream.id, stream.trailers, END_STREAM))
        self._finish(stream)

    def _flush_blocked(self) -> None:
        if not self._blocked:
            return
        now = self._loop.time() if self._loop is not None else 0.0
        parts: list[bytes] = []
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                break
            if stream.send_window > 0:
                self._send_body(stream, parts)  # a stream sent whole leaves _blocked
                stream.stalled_since = now  # it moved: the send timeout starts again
        if parts:
            self._write(b"".join(parts))

    def _finish(self, stream: Stream) -> None:
        """Our side is done: the stream closes (a peer still sending is told to stop)."""
        stream.discard = True  # what may still arrive of its body is not wanted
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        if stream.held or stream.unsized:
            self._release(stream)
        if not stream.remote_closed:
            self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
            self._closed_early(stream.id)
        # an answered stream gives back some of the budgets
        if self._resets:
            self._resets -= 1
        if self._control:
            control = self._control - _STREAM_REFUND
            self._control = control if control > 0 else 0
        if not self.streams:
            self._close_if_done()
