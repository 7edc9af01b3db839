"""One HTTP/2 request/response exchange of the built-in server (transport/http2.py), and what
a connection tells its application about it."""

from __future__ import annotations

import asyncio
from typing import Protocol, TypeVar

#: the connection an application is told about (``http2.Http2Connection``)
Conn = TypeVar("Conn", contravariant=True)


class Stream:
    """One request/response exchange."""

    __slots__ = (
        "body",
        "body_bytes",
        "buffer",
        "charged",
        "context",
        "discard",
        "filled",
        "head",
        "head_size",
        "headers",
        "held",
        "id",
        "length",
        "limit",
        "outbox",
        "recv_window",
        "remote_closed",
        "reserved",
        "send_window",
        "stalled_since",
        "task",
        "trailers",
        "unacked",
        "unsent",
        "unsized",
    )

    def __init__(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], window: int, recv_window: int
    ) -> None:
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
        self.length = -1  # the request's content-length, if it gave one
        #: the most body bytes the application takes on this stream; 0: the connection's limit
        self.limit = 0
        self.send_window = window
        #: what the peer may still send on the stream before our next WINDOW_UPDATE for it
        self.recv_window = recv_window
        #: body bytes taken since our last WINDOW_UPDATE for the stream (below 0: the window
        #: was opened ahead of them)
        self.unacked = 0
        #: body bytes held for the application (a sized buffer counts whole), counted in the
        #: connection's and the server's buffered bytes until handed over or dropped
        self.held = 0
        #: of them, room reserved for the rest of the message (a sized buffer): its window is
        #: kept open for all of it
        self.reserved = 0
        #: bytes kept as they came (not in a sized buffer): the stream's window gets them back
        #: once the application takes them (a streaming call's messages)
        self.unsized = 0
        #: bytes of the server's budget the call holds from its hand-over to its end: its
        #: body (no longer the connection's: the windows have them back) and its answer
        #: while that waits for the peer's windows
        self.charged = 0
        self.unsent = 0  # of ``charged``, the answer's bytes
        self.outbox: memoryview | None = None  # response body not sent yet (flow control)
        self.stalled_since = 0.0  # when the outbox last waited for a window to open
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


class Http2App(Protocol[Conn]):
    """What a connection (``Conn``: ``http2.Http2Connection``) tells its application."""

    def headers_received(self, connection: Conn, stream: Stream) -> None:
        """A new stream's header block is complete (the body may follow)."""

    def body_head_received(self, connection: Conn, stream: Stream, head: bytes) -> int | None:
        """The first ``stream.head_size`` bytes of the body (``head``) have arrived: how many
        bytes follow them, if the application knows. They are then read into one buffer of
        that size, which ``stream.data(len(head))`` returns without a copy, once the connection
        has room for it (until then the stream waits, held back by its window). None: the
        rest is collected as it comes, and must fit the stream's initial window unless the
        application takes it as it comes (``connection.taken``, ``connection.expect``). The
        application may answer the stream here instead."""

    def body_received(self, connection: Conn, stream: Stream) -> None:
        """The stream's body is complete (the peer ended its side)."""

    def data_received(self, connection: Conn, stream: Stream) -> None:
        """More of a body that arrives in several frames, kept in ``stream.body`` (not in a
        sized buffer), before it is complete: a streaming call takes its messages as they
        come (``connection.taken`` gives their bytes back to the windows)."""

    def drained(self, connection: Conn, stream: Stream) -> None:
        """An open-ended response's data waiting for the peer's windows is all sent."""

    def body_too_large(self, connection: Conn, stream: Stream) -> None:
        """The body passed ``max_body_bytes``; what arrived is dropped."""

    def buffers_full(self, connection: Conn, stream: Stream, server_wide: bool) -> None:
        """The body would take the connection's (or, ``server_wide``, all connections')
        buffered request bytes past their limit; what arrived is dropped."""

    def stream_reset(self, stream: Stream) -> None:
        """The peer reset the stream (or the connection is gone) before it was answered."""
