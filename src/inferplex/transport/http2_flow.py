"""The receiving side's flow control of a server HTTP/2 connection, sans I/O: its receive
windows and the request bytes it buffers, kept within the buffering limits by the invariants
in transport/http2.py's docstring.

``ReceiveFlow`` knows no asyncio, no transport and no application: the WINDOW_UPDATE frames
it decides on go to the ``emit`` sink it is given (the connection's write), a stream it
cannot make room for goes to ``refused``, and a waiting stream granted room goes to
``granted`` (the connection opens its window unless it is reading that stream's DATA frame
now). It is driven by the connection as frames are read and answers written, and tested
alone by calling it (tests/unit/transport/test_http2_receive_flow.py).
"""

from __future__ import annotations

from collections.abc import Callable

from inferplex.transport.buffers import uninitialised
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http2_wire import U32, WINDOW_UPDATE, frame

_U32 = U32

#: seconds the answers held for a peer's windows may stand still before its new calls are
#: refused (while those answers are above the connection's buffer limit)
ANSWERS_STALL_S = 1.0
#: our receive windows: the connection's (replenished once half is read), and the largest
#: and smallest initial window of a stream (initial_stream_window)
CONNECTION_WINDOW = 16 << 20
STREAM_WINDOW = 1 << 20
MIN_STREAM_WINDOW = 64 << 10
HALF_WINDOW = CONNECTION_WINDOW // 2


def initial_stream_window(limits: Http2Limits) -> int:
    """Every stream's initial window: what a stream may send before it has room of its own.
    Its share of the connection's buffer limit, so that the streams waiting for room hold
    no more than that limit together (within MIN_STREAM_WINDOW and STREAM_WINDOW)."""
    share = limits.connection_buffer_bytes // max(limits.max_concurrent_streams, 1)
    return max(MIN_STREAM_WINDOW, min(STREAM_WINDOW, share))


class ReceiveFlow:
    """One connection's receive windows and buffered request bytes (and the answer bytes
    held for the peer's windows, which count in the same server-wide budget)."""

    def __init__(
        self,
        limits: Http2Limits,
        counters: Http2Counters,
        emit: Callable[[bytes], None],
        refused: Callable[[Stream, bool], None],
        granted: Callable[[Stream], None],
    ) -> None:
        self._limits = limits
        self._counters = counters
        self._emit = emit
        self._refused = refused
        self._granted = granted
        #: what the peer may still send on the connection, and what it sent that we took
        #: since our last connection WINDOW_UPDATE
        self.recv_window = CONNECTION_WINDOW
        self.unacked = 0
        self.held = 0  # request bytes buffered for this connection's streams
        self.reserved = 0  # of them, room reserved for messages (sized buffers)
        #: streams whose message waits for room, in order, with the room each needs
        self.waiting: dict[int, tuple[Stream, int]] = {}
        #: every stream's initial window: what a stream may send before it has room
        self.stream_window = initial_stream_window(limits)
        self.unsent = 0  # response bytes waiting for the peer's windows (in streams' charged)
        #: when the answers held for the peer's windows last moved (or began to be held)
        self.answers_moved_at = 0.0

    # -- windows --------------------------------------------------------------------------
    def ack(self, count: int) -> None:
        """``count`` flow-controlled bytes were read: the connection window gets them back
        (in one WINDOW_UPDATE once half the window is owed)."""
        unacked = self.unacked + count
        if unacked >= HALF_WINDOW:
            self._emit(frame(WINDOW_UPDATE, 0, 0, _U32.pack(unacked)))
            self.recv_window += unacked
            unacked = 0
        self.unacked = unacked

    def give_back(self, stream: Stream, count: int) -> None:
        """``count`` of the stream's bytes were taken by its application: its window gets
        them back (in one WINDOW_UPDATE once half of it is owed; window opened ahead, which
        ``stream.unacked`` holds as a debt, is paid off first)."""
        stream.unacked += count
        if stream.unacked >= self.stream_window // 2:
            self._emit(frame(WINDOW_UPDATE, 0, stream.id, _U32.pack(stream.unacked)))
            stream.recv_window += stream.unacked
            stream.unacked = 0

    def open(self, stream: Stream, due: int) -> None:
        """Open the stream's window so that the ``due`` bytes its peer still has to send
        for the message it is in fit (called between DATA frames: the frame being read is
        counted in ``recv_window`` already, not in ``due``)."""
        more = due - stream.recv_window
        if more > 0:
            self._emit(frame(WINDOW_UPDATE, 0, stream.id, _U32.pack(more)))
            stream.recv_window += more
            stream.unacked -= more  # opened ahead of what the application took

    # -- buffered bytes -------------------------------------------------------------------
    def taken(self, stream: Stream, count: int) -> None:
        """A streaming call's application took ``count`` bytes of the body held for it: no
        longer buffered, and the stream's window gets them back."""
        count = min(count, stream.unsized)
        if count <= 0:
            return
        stream.unsized -= count
        held = min(count, stream.held)
        stream.held -= held
        self.held -= held
        counters = self._counters
        counters.buffered -= held
        counters.budget.used -= held
        self.give_back(stream, count)

    def handed(self, stream: Stream) -> None:
        """The stream's body is the application's now: it leaves the connection's buffer
        (room it had reserved goes to the streams waiting for room, in order), but it stays
        in the server's budget until the stream ends (``release``): a body queued for a
        busy model still holds memory."""
        held = stream.held
        if held:
            stream.held = 0
            self.held -= held
            self._counters.buffered -= held
            stream.charged += held
        stream.unsized = 0
        self._end_reservation(stream)

    def charge_unsent(self, stream: Stream, count: int, now: float) -> None:
        """An answer of ``count`` bytes waits for the peer's windows (at ``now``): held until
        the stream ends, in the server's budget and this connection's ``unsent``."""
        if not self.unsent:
            self.answers_moved_at = now
        stream.charged += count
        stream.unsent += count
        self.unsent += count
        self._counters.budget.used += count

    def answers_stalled(self, now: float) -> bool:
        """The answers held for the peer's windows have not moved for ``ANSWERS_STALL_S``:
        the peer is not reading them (a client that reads, if slowly, opens windows and keeps
        them moving)."""
        return now - self.answers_moved_at >= ANSWERS_STALL_S

    def release(self, stream: Stream) -> None:
        """The stream ended or its body is dropped: what it held of the connection's buffer
        and of the server's budget is given back, and room it had reserved goes to the
        streams waiting for room, in order."""
        charged = stream.charged
        if charged:
            stream.charged = 0
            budget = self._counters.budget
            budget.used -= charged
            self.unsent -= stream.unsent
            stream.unsent = 0
            budget.freed(charged)
        held = stream.held
        if held:
            stream.held = 0
            self.held -= held
            counters = self._counters
            counters.buffered -= held
            counters.budget.used -= held
        stream.unsized = 0
        self._end_reservation(stream)

    def _end_reservation(self, stream: Stream) -> None:
        """The stream no longer waits for room nor holds any: the next waiting get it."""
        reserved = stream.reserved
        if reserved:
            stream.reserved = 0
            self.reserved -= reserved
        waiting = self.waiting
        if waiting:
            waiting.pop(stream.id, None)
            if reserved:
                self._grant()

    def hold(self, stream: Stream, count: int) -> bool:
        """Count ``count`` more bytes buffered for ``stream``, unless that takes the
        connection past its limit (one body alone may take more; a stream waiting for room
        holds at most its initial window, which every stream has) or the server past its
        own: then the stream is refused and what it holds dropped."""
        counters = self._counters
        budget = counters.budget
        if stream.id in self.waiting:
            limit = "server_buffer" if budget.limit and budget.used + count > budget.limit else None
        else:
            limit = self._room(count, stream.held)
        if limit is None:
            stream.held += count
            self.held += count
            counters.buffered += count
            budget.used += count
            return True
        self.refuse(stream, limit)
        return False

    def refuse(self, stream: Stream, limit: str) -> None:
        """No room for the stream's body, now or to come: refused, what it holds dropped."""
        self._counters.exceeded[limit] += 1
        stream.discard = True
        stream.body.clear()
        stream.buffer = None
        self.release(stream)
        self._refused(stream, limit == "server_buffer")

    def _room(self, count: int, own: int) -> str | None:
        """Which buffering limit ``count`` more bytes would pass (None: neither), for a
        stream holding ``own`` of the connection's: the server's, or the connection's
        (which a stream holding all the connection holds may pass, for one large body)."""
        budget = self._counters.budget
        if budget.limit and budget.used + count > budget.limit:
            return "server_buffer"
        if self.held + count > self._limits.connection_buffer_bytes and self.held != own:
            return "connection_buffer"
        return None

    def admit(self, stream: Stream, size: int) -> None:
        """The stream's message announces ``size`` more bytes: room for all of them is
        reserved now (a sized buffer; its window opens at the end of the DATA frame), or once
        the reservations before it end (it waits, in order, its window not opened past its
        initial one), or never (past the server-wide limit): refused."""
        budget = self._counters.budget
        if budget.limit and size > budget.limit:
            self.refuse(stream, "server_buffer")
        elif not self.waiting and self._fits(size):
            self._reserve(stream, size)
        elif self.reserved:
            self._counters.exceeded["connection_buffer_waits"] += 1
            self.waiting[stream.id] = (stream, size)
        else:  # nothing of this connection's to wait for: the server's budget is spent
            self.refuse(stream, "server_buffer")

    def _fits(self, size: int) -> bool:
        """Whether a reservation of ``size`` fits: within the server's budget, and within the
        connection's limit or the only one (a message larger than the limit comes alone)."""
        budget = self._counters.budget
        if budget.limit and budget.used + size > budget.limit:
            return False
        reserved = self.reserved
        return not reserved or reserved + size <= self._limits.connection_buffer_bytes

    def _reserve(self, stream: Stream, size: int) -> None:
        """Room for the ``size`` bytes of the stream's message still to come: one buffer,
        counted whole from now on (what arrived while it waited is moved into it)."""
        buffer = uninitialised(size)
        kept = stream.body
        filled = 0
        for piece in kept:
            buffer[filled : filled + len(piece)] = piece
            filled += len(piece)
        kept.clear()
        stream.buffer, stream.filled, stream.unsized = buffer, filled, 0
        more = size - stream.held
        stream.held = size
        stream.reserved = size
        self.reserved += size
        self.held += more
        counters = self._counters
        counters.buffered += more
        counters.budget.used += more

    def _grant(self) -> None:
        """Streams waiting for room get it, in order, while it lasts; one that cannot get it
        once this connection holds no reservation is refused (the server's budget is spent
        and nothing of this connection's will give it back)."""
        waiting = self.waiting
        while waiting:
            stream, size = next(iter(waiting.values()))
            if not self._fits(size):
                if self.reserved:
                    return
                del waiting[stream.id]
                self.refuse(stream, "server_buffer")
                continue
            del waiting[stream.id]
            if stream.filled + sum(len(piece) for piece in stream.body) > size:
                continue  # more arrived than the message announced: no room needed
            self._reserve(stream, size)
            self._granted(stream)
