"""Responses of a server HTTP/2 connection (transport/http2.py): a header block, the body as
DATA frames as the peer's windows allow (what they do not is sent as they open, or dropped
after the send timeout), and a trailer block. An open-ended response (a streaming call's)
sends its header block, then its data piece by piece, then its trailers."""

from __future__ import annotations

from inferplex.transport.http2_base import _STREAM_REFUND, Http2Base
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http2_wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    HEADERS,
    NO_ERROR,
    RST_STREAM,
    U32,
    frame,
)

_U32, _HEADER = U32, FRAME_HEADER
_TRAILERS_FLAGS = END_STREAM | END_HEADERS


class Http2Output(Http2Base):
    """The sending half of a server connection."""

    def respond(
        self, stream: Stream, head: bytes, prefix: bytes, body: bytes, trailers: bytes
    ) -> None:
        """Answer ``stream``: the ``head`` block, ``prefix`` then ``body`` as DATA (as the
        windows allow; the prefix, gRPC's, is not joined to the body first: a copy saved),
        then the ``trailers`` block, which ends the stream."""
        if self._closed or self.streams.get(stream.id) is not stream:
            return  # reset or gone: nobody is waiting
        size = len(prefix) + len(body)
        limit = self._peer_frame_size
        if (
            size <= stream.send_window
            and size <= self._send_window
            and size <= limit
            and len(head) <= limit
            and len(trailers) <= limit
        ):  # the usual answer: three frames in one write, built in one join
            self._send_whole(stream, head, prefix, body, trailers, size)
            return
        parts = self._header_frames(stream.id, head, 0)
        stream.trailers = trailers
        stream.outbox = memoryview(prefix + body)
        self._send_body(stream, parts)
        self._write(b"".join(parts))
        if stream.outbox is not None:
            now = self._loop.time() if self._loop is not None else 0.0
            self.flow.charge_unsent(stream, len(stream.outbox), now)
            self._blocked[stream.id] = stream
            if self._limits.send_timeout_s and self._loop is not None:
                stream.stalled_since = now = self._loop.time()
                self._arm(now + self._limits.send_timeout_s)

    def _send_whole(
        self, stream: Stream, head: bytes, prefix: bytes, body: bytes, trailers: bytes, size: int
    ) -> None:
        """``respond`` of an answer the windows and the frame size take whole."""
        stream_id, head_size, trailers_size = stream.id, len(head), len(trailers)
        self._write(
            b"".join(
                (
                    _HEADER.pack(
                        head_size >> 16, head_size & 0xFFFF, HEADERS, END_HEADERS, stream_id
                    ),
                    head,
                    _HEADER.pack(size >> 16, size & 0xFFFF, DATA, 0, stream_id),
                    prefix,
                    body,
                    _HEADER.pack(
                        trailers_size >> 16,
                        trailers_size & 0xFFFF,
                        HEADERS,
                        _TRAILERS_FLAGS,
                        stream_id,
                    ),
                    trailers,
                )
            )
        )
        stream.send_window -= size
        self._send_window -= size
        self._finish(stream)  # (which earns the DATA frame's WINDOW_UPDATE too)

    # -- open-ended responses (streaming calls) ---------------------------------------------
    def send_headers(self, stream: Stream, block: bytes) -> None:
        """Start an open-ended response: the ``block`` of headers, the stream left open for
        ``send_data`` and, last, ``send_trailers``."""
        if self._closed or self.streams.get(stream.id) is not stream:
            return
        self._write(b"".join(self._header_frames(stream.id, block, 0)))

    def send_data(self, stream: Stream, data: bytes) -> bool:
        """Send ``data`` on an open-ended response as the windows allow: True if it all went
        out, False if some waits for the peer's windows (``Http2App.drained`` tells when it
        is out; the send timeout drops a stream that waits too long)."""
        if self._closed or self.streams.get(stream.id) is not stream:
            return True  # reset or gone: nobody reads it
        stream.outbox = memoryview(data)
        parts: list[bytes] = []
        self._send_body(stream, parts)
        if parts:
            self._write(b"".join(parts))
        if stream.outbox is None:
            return True
        self._blocked[stream.id] = stream
        if self._limits.send_timeout_s and self._loop is not None:
            stream.stalled_since = now = self._loop.time()
            self._arm(now + self._limits.send_timeout_s)
        return False

    def send_trailers(self, stream: Stream, block: bytes) -> None:
        """End an open-ended response (its data all sent) with the trailer ``block``."""
        if self._closed or self.streams.get(stream.id) is not stream:
            return
        self._write(b"".join(self._header_frames(stream.id, block, END_STREAM)))
        self._finish(stream)

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
        if sent:  # DATA sent: the peer's WINDOW_UPDATEs follow
            self._earn(sent)
        if outbox:
            return
        stream.outbox = None
        if not stream.trailers:  # an open-ended response (a streaming call): more follows
            self._blocked.pop(stream.id, None)
            self._app.drained(self, stream)
            return
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
            self.flow.answers_moved_at = now
            self._write(b"".join(parts))

    def _finish(self, stream: Stream) -> None:
        """Our side is done: the stream closes (a peer still sending is told to stop)."""
        stream.discard = True  # what may still arrive of its body is not wanted
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        if stream.held or stream.unsized or stream.charged or self.flow.waiting:
            self.flow.release(stream)
        if not stream.remote_closed:
            self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
            self._closed_early(stream.id)
        # an answered stream gives back some of the budgets
        self._resets.give_back()
        self._earn(_STREAM_REFUND)
        if not self.streams:
            self._close_if_done()
