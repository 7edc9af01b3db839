"""What every part of a server HTTP/2 connection (transport/http2.py) shares: its state, the
asyncio callbacks, receive windows and buffered bytes, the budgets of work a client may make
it do for nothing, and closing (http2_limits.py says what each limit is; the connection's
timers are in http2_timers.py).

Nothing here runs per frame on the happy path but a counter: a budget is looked at against
the clock only once its counter passes its burst.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from inferplex.transport.buffers import uninitialised
from inferplex.transport.http2_budget import FrameBudget
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_stream import Http2App, Stream
from inferplex.transport.http2_wire import (
    DEFAULT_WINDOW,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    MAX_WINDOW,
    MIN_FRAME_SIZE,
    NO_ERROR,
    PING,
    RST_STREAM,
    U32,
    WINDOW_UPDATE,
    Http2Error,
    frame,
)

logger = logging.getLogger(__name__)

_U32 = U32

#: seconds the answers held for a peer's windows may stand still before its new calls are
#: refused (while those answers are above the connection's buffer limit)
ANSWERS_STALL_S = 1.0
#: our receive windows: the connection's (replenished once half is read), and the largest
#: and smallest initial window of a stream (initial_stream_window)
CONNECTION_WINDOW = 16 << 20
STREAM_WINDOW = 1 << 20
MIN_STREAM_WINDOW = 64 << 10
_HALF_WINDOW = CONNECTION_WINDOW // 2
#: the PING of a graceful close, and how long its ACK is awaited
_DRAIN_PING = b"draining"
DRAIN_PING_TIMEOUT_S = 1.0
#: the PING of keepalive
_KEEPALIVE_PING = b"keepaliv"
#: after a connection error's GOAWAY and our FIN, what the peer still sends is read and
#: dropped for this long before the socket closes (closing it with unread data would make
#: the kernel answer with a reset, which can destroy the GOAWAY before the peer reads it)
LINGER_S = 2.0
#: streams we closed before the peer ended them, remembered so that what it sent meanwhile
#: is dropped rather than taken as a protocol error; and gaps in the stream ids it used
_EARLY_CLOSED_KEPT = 256
_GAPS_KEPT = 16
#: the least time between two looks of a connection's timer
_TICK_S = 0.01
#: what every stream answered, every stream opened and every DATA frame sent give back of
#: the control budget (``Http2Base._earn``)
_STREAM_REFUND = 8
_OPEN_REFUND = 4


def initial_stream_window(limits: Http2Limits) -> int:
    """Every stream's initial window: what a stream may send before it has room of its own.
    Its share of the connection's buffer limit, so that the streams waiting for room hold
    no more than that limit together (within MIN_STREAM_WINDOW and STREAM_WINDOW)."""
    share = limits.connection_buffer_bytes // max(limits.max_concurrent_streams, 1)
    return max(MIN_STREAM_WINDOW, min(STREAM_WINDOW, share))


class Http2Base(asyncio.BufferedProtocol):
    """State and upkeep of a server connection; Http2Output adds sending, Http2Frames the
    frames other than DATA, Http2Connection reading."""

    def __init__(
        self,
        app: Http2App[Any],
        connections: set[Http2Base],
        limits: Http2Limits,
        counters: Http2Counters,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self._app = app
        self._connections = connections
        self._limits = limits
        self._counters = counters
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self.streams: dict[int, Stream] = {}
        self._last_stream_id = 0
        self._early_closed: dict[int, None] = {}
        self._gaps: list[tuple[int, int]] = []
        self._settings_seen = False  # the preface and the client's first SETTINGS arrived
        # sending
        self._send_window = DEFAULT_WINDOW
        self._peer_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame_size = MIN_FRAME_SIZE
        self._blocked: dict[int, Stream] = {}  # streams waiting for window
        self._unsent: list[bytes] = []  # writes held for one send at the end of the turn
        # receiving: what the peer may still send, and what it sent that we took since our
        # last connection WINDOW_UPDATE
        self._recv_window = CONNECTION_WINDOW
        self._unacked = 0
        self._held = 0  # request bytes buffered for this connection's streams
        self._reserved = 0  # of them, room reserved for messages (sized buffers)
        #: streams whose message waits for room, in order, with the room each needs
        self._waiting: dict[int, tuple[Stream, int]] = {}
        #: every stream's initial window: what a stream may send before it has room
        self._stream_window = initial_stream_window(limits)
        #: the stream whose DATA payload is being read
        self._data_stream: Stream | None = None
        self._settings_acked = False  # the peer acknowledged our SETTINGS
        self.unsent = 0  # response bytes waiting for the peer's windows (in streams' charged)
        #: when the answers held for the peer's windows last moved (or began to be held)
        self.answers_moved_at = 0.0
        # budgets: frames that did no work, and streams reset or refused
        self._resets = FrameBudget(limits.max_resets, limits.resets_per_s)
        self._control = FrameBudget(limits.max_control_frames, limits.control_frames_per_s)
        # timers
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._born = 0.0
        self._idle_since = 0.0
        self._reads = 0
        self._idle_reads = 0
        self._ka_reads = 0
        self._ka_at = 0.0
        self._ping_sent_at: float | None = None
        self._paused_at: float | None = None
        self._age_deadline: float | None = None
        self._linger: asyncio.TimerHandle | None = None
        # closing
        self._draining: asyncio.TimerHandle | None = None  # first GOAWAY sent, final pending
        self._goaway_sent = False
        self._peer_leaving = False
        self._write_closed = False  # our FIN is sent
        self._closed = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._connections.add(self)
        self._counters.connections += 1
        now = self._loop.time()
        self._born = self._idle_since = self._ka_at = self._resets.since = self._control.since = now

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None and self in self._connections:
            self._counters.connections -= 1
        self._closed = True
        for handle in (self._draining, self._timer, self._linger):
            if handle is not None:
                handle.cancel()
        self._connections.discard(self)
        self._drop_streams()

    # -- streams closed early, writing -----------------------------------------------------
    def _reset(self, stream: Stream, code: int) -> None:
        stream.discard = True
        self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(code)))
        self._closed_early(stream.id)
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        self._release(stream)
        if not self.streams and self._loop is not None:
            self._idle_since = self._loop.time()
        self._app.stream_reset(stream)

    def _closed_early(self, stream_id: int) -> None:
        """We closed the stream before the peer ended it: what it sent meanwhile is dropped."""
        early = self._early_closed
        early[stream_id] = None
        if len(early) > _EARLY_CLOSED_KEPT:
            del early[next(iter(early))]

    def _write(self, data: bytes) -> None:
        """Send ``data``: at once when this connection has no other open stream; otherwise
        held until the loop's callbacks of this turn have run, so that the answers of a batch,
        which end many calls of one connection together, leave in one send (a send is a system
        call and most of an answer's cost on the loop)."""
        if self._transport is None or self._closed or self._write_closed:
            return
        unsent = self._unsent
        if unsent:
            unsent.append(data)
        elif len(self.streams) > 1 and self._loop is not None:
            unsent.append(data)
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        """Send what ``_write`` held; called before anything that ends our side."""
        unsent = self._unsent
        if not unsent:
            return
        self._unsent = []
        if self._transport is not None and not self._closed and not self._write_closed:
            self._transport.writelines(unsent)

    # -- receive windows and buffered bytes (the module docstring of http2.py: invariants) --
    def _ack(self, count: int) -> None:
        """``count`` flow-controlled bytes were read: the connection window gets them back
        (in one WINDOW_UPDATE once half the window is owed)."""
        unacked = self._unacked + count
        if unacked >= _HALF_WINDOW:
            self._write(frame(WINDOW_UPDATE, 0, 0, _U32.pack(unacked)))
            self._recv_window += unacked
            unacked = 0
        self._unacked = unacked

    def _give_back(self, stream: Stream, count: int) -> None:
        """``count`` of the stream's bytes were taken by its application: its window gets
        them back (in one WINDOW_UPDATE once half of it is owed; window opened ahead, which
        ``stream.unacked`` holds as a debt, is paid off first)."""
        stream.unacked += count
        if stream.unacked >= self._stream_window // 2:
            self._write(frame(WINDOW_UPDATE, 0, stream.id, _U32.pack(stream.unacked)))
            stream.recv_window += stream.unacked
            stream.unacked = 0

    def _open(self, stream: Stream, due: int) -> None:
        """Open the stream's window so that the ``due`` bytes its peer still has to send
        for the message it is in fit (called between DATA frames: the frame being read is
        counted in ``recv_window`` already, not in ``due``)."""
        more = due - stream.recv_window
        if more > 0:
            self._write(frame(WINDOW_UPDATE, 0, stream.id, _U32.pack(more)))
            stream.recv_window += more
            stream.unacked -= more  # opened ahead of what the application took

    def expect(self, stream: Stream, due: int) -> None:
        """A streaming call's message is ``due`` bytes short of whole: its window opens for
        them (a message larger than the window would wait for itself otherwise); whole
        messages still wait to be taken before the window opens for the next."""
        if (
            stream is not self._data_stream
            and not stream.remote_closed
            and self.streams.get(stream.id) is stream
        ):
            self._open(stream, due)

    def taken(self, stream: Stream, count: int) -> None:
        """A streaming call's application took ``count`` bytes of the body held for it: no
        longer buffered, and the stream's window gets them back, so the peer may send more
        (until it does, a peer whose messages are not taken is held back by flow control). A
        message is a request's work, as a stream is: it gives back the control frames an
        answered stream gives back (the peer's WINDOW_UPDATEs and PINGs follow the answers)."""
        self._earn(_STREAM_REFUND)
        count = min(count, stream.unsized)
        if count <= 0:
            return
        stream.unsized -= count
        held = min(count, stream.held)
        stream.held -= held
        self._held -= held
        counters = self._counters
        counters.buffered -= held
        counters.budget.used -= held
        self._give_back(stream, count)

    def _handed(self, stream: Stream) -> None:
        """The stream's body is the application's now: it leaves the connection's buffer
        (room it had reserved goes to the streams waiting for room, in order), but it stays
        in the server's budget until the stream ends (``_release``): a body queued for a
        busy model still holds memory."""
        held = stream.held
        if held:
            stream.held = 0
            self._held -= held
            self._counters.buffered -= held
            stream.charged += held
        stream.unsized = 0
        self._end_reservation(stream)

    def _charge_unsent(self, stream: Stream, count: int) -> None:
        """An answer of ``count`` bytes waits for the peer's windows: held until the stream
        ends, in the server's budget and this connection's ``unsent``."""
        if not self.unsent and self._loop is not None:
            self.answers_moved_at = self._loop.time()
        stream.charged += count
        stream.unsent += count
        self.unsent += count
        self._counters.budget.used += count

    def answers_stalled(self, now: float) -> bool:
        """The answers held for the peer's windows have not moved for ``ANSWERS_STALL_S``:
        the peer is not reading them (a client that reads, if slowly, opens windows and keeps
        them moving)."""
        return now - self.answers_moved_at >= ANSWERS_STALL_S

    def _release(self, stream: Stream) -> None:
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
            self._held -= held
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
            self._reserved -= reserved
        waiting = self._waiting
        if waiting:
            waiting.pop(stream.id, None)
            if reserved:
                self._grant()

    def _hold(self, stream: Stream, count: int) -> bool:
        """Count ``count`` more bytes buffered for ``stream``, unless that takes the
        connection past its limit (one body alone may take more; a stream waiting for room
        holds at most its initial window, which every stream has) or the server past its
        own: then the stream is refused and what it holds dropped."""
        counters = self._counters
        budget = counters.budget
        if stream.id in self._waiting:
            limit = "server_buffer" if budget.limit and budget.used + count > budget.limit else None
        else:
            limit = self._room(count, stream.held)
        if limit is None:
            stream.held += count
            self._held += count
            counters.buffered += count
            budget.used += count
            return True
        self._refuse_room(stream, limit)
        return False

    def _refuse_room(self, stream: Stream, limit: str) -> None:
        """No room for the stream's body, now or to come: refused, what it holds dropped."""
        self._counters.exceeded[limit] += 1
        stream.discard = True
        stream.body.clear()
        stream.buffer = None
        self._release(stream)
        self._app.buffers_full(self, stream, limit == "server_buffer")

    def _room(self, count: int, own: int) -> str | None:
        """Which buffering limit ``count`` more bytes would pass (None: neither), for a
        stream holding ``own`` of the connection's: the server's, or the connection's
        (which a stream holding all the connection holds may pass, for one large body)."""
        budget = self._counters.budget
        if budget.limit and budget.used + count > budget.limit:
            return "server_buffer"
        if self._held + count > self._limits.connection_buffer_bytes and self._held != own:
            return "connection_buffer"
        return None

    def _admit(self, stream: Stream, size: int) -> None:
        """The stream's message announces ``size`` more bytes: room for all of them is
        reserved now (a sized buffer; its window opens at the end of the DATA frame), or once
        the reservations before it end (it waits, in order, its window not opened past its
        initial one), or never (past the server-wide limit): refused."""
        budget = self._counters.budget
        if budget.limit and size > budget.limit:
            self._refuse_room(stream, "server_buffer")
        elif not self._waiting and self._fits(size):
            self._reserve(stream, size)
        elif self._reserved:
            self._counters.exceeded["connection_buffer_waits"] += 1
            self._waiting[stream.id] = (stream, size)
        else:  # nothing of this connection's to wait for: the server's budget is spent
            self._refuse_room(stream, "server_buffer")

    def _fits(self, size: int) -> bool:
        """Whether a reservation of ``size`` fits: within the server's budget, and within the
        connection's limit or the only one (a message larger than the limit comes alone)."""
        budget = self._counters.budget
        if budget.limit and budget.used + size > budget.limit:
            return False
        reserved = self._reserved
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
        self._reserved += size
        self._held += more
        counters = self._counters
        counters.buffered += more
        counters.budget.used += more

    def _grant(self) -> None:
        """Streams waiting for room get it, in order, while it lasts; one that cannot get it
        once this connection holds no reservation is refused (the server's budget is spent
        and nothing of this connection's will give it back)."""
        waiting = self._waiting
        while waiting:
            stream, size = next(iter(waiting.values()))
            if not self._fits(size):
                if self._reserved:
                    return
                del waiting[stream.id]
                self._refuse_room(stream, "server_buffer")
                continue
            del waiting[stream.id]
            if stream.filled + sum(len(piece) for piece in stream.body) > size:
                continue  # more arrived than the message announced: no room needed
            self._reserve(stream, size)
            if stream is not self._data_stream:  # (otherwise at the end of its frame)
                self._open(stream, stream.head_size + size - stream.body_bytes)

    # -- budgets --------------------------------------------------------------------------
    def _spend_control(self) -> None:
        """A frame that does no work: a client sending too many is told to calm down."""
        if not self._control.spend(self._loop):
            self._calm("control_frames", "too many frames that do no work")

    def _earn(self, frames: int) -> None:
        """Work done for the peer makes room for ``frames`` of the control frames an honest
        peer sends with it: a stream opened (the WINDOW_UPDATE that opens its response's
        window), a stream answered or a message taken (the WINDOW_UPDATEs and PINGs that
        follow answers), a DATA frame sent (its WINDOW_UPDATE). The room can be earned up to
        one burst ahead: a burst of streams sends their HEADERS first and their control
        frames after, and must not spend the budget of a flood."""
        self._control.earn(frames)

    def _spend_reset(self) -> None:
        """A stream reset by the peer before it was answered, refused, or reset for its
        peer's error (the rapid reset and reset flood attacks)."""
        if not self._resets.spend(self._loop):
            self._calm("resets", "too many streams reset or refused")

    def _calm(self, limit: str, message: str) -> None:
        self._counters.exceeded[limit] += 1
        raise Http2Error(ENHANCE_YOUR_CALM, message)

    # -- closing --------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """No open streams, and no graceful close half done."""
        return not self.streams and self._draining is None

    def finish_writing(self) -> None:
        """The server is done with this connection: the final GOAWAY, then our side ends
        (FIN). Reading goes on until the peer closes its side: closing a socket with unread
        data makes the kernel reset the connection and drop what we sent last."""
        self._final_goaway()
        self._flush()
        transport = self._transport
        if transport is None or self._closed:
            return
        if transport.can_write_eof():
            transport.write_eof()
            self._write_closed = True
        else:
            self._stop()
            transport.close()

    def goaway(self) -> None:
        """Graceful close, in two steps as gRPC servers do: a first GOAWAY naming the
        largest stream id (the peer stops opening streams; those already on their way are
        still served) and a PING; when its ACK (one round trip) or a second has passed, the
        final GOAWAY with the last stream id taken. Open streams finish; the server closes
        the connection (after every connection's streams have finished)."""
        if self._goaway_sent or self._draining is not None or self._loop is None:
            return
        self._write(
            frame(GOAWAY, 0, 0, _U32.pack(MAX_WINDOW) + _U32.pack(NO_ERROR))
            + frame(PING, 0, 0, _DRAIN_PING)
        )
        self._draining = self._loop.call_later(DRAIN_PING_TIMEOUT_S, self._final_goaway)

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
        # send its next call into a closing socket. A connection draining for its age
        # closes itself once its streams are done.
        if self.streams or self._transport is None:
            return
        if self._peer_leaving or (self._age_deadline is not None and self._goaway_sent):
            self._fail(NO_ERROR, "done")

    def _fail(self, code: int, message: str) -> None:
        """The connection ends: GOAWAY naming why, every open stream cancelled, our FIN,
        and what the peer still sends read and dropped for LINGER_S before the close."""
        if self._closed:
            return
        if code != NO_ERROR:
            logger.debug("HTTP/2 connection error %d: %s", code, message)
        if code != NO_ERROR or not self._goaway_sent:
            goaway = _U32.pack(self._last_stream_id) + _U32.pack(code) + message.encode()[:256]
            self._write(frame(GOAWAY, 0, 0, goaway))
        self._flush()
        self._goaway_sent = True
        self._drop_streams()
        self._stop()
        transport = self._transport
        if transport is None:
            return
        if self._write_closed or not transport.can_write_eof() or self._loop is None:
            transport.close()
            return
        transport.write_eof()
        self._write_closed = True
        transport.resume_reading()  # read and drop: unread bytes would make a reset
        self._linger = self._loop.call_later(LINGER_S, self.abort)

    def _drop_streams(self) -> None:
        streams, self.streams = self.streams, {}
        self._waiting.clear()
        self._blocked.clear()
        for stream in streams.values():
            self._release(stream)
            self._app.stream_reset(stream)

    def _stop(self) -> None:
        """Nothing more is handled or written, and no timer of ours runs: the transport is
        closing (it calls ``connection_lost`` a turn of the loop later, and a timer due
        meanwhile would write to a closed socket)."""
        self._closed = True
        for handle in (self._draining, self._timer):
            if handle is not None:
                handle.cancel()
        self._draining, self._timer, self._timer_at = None, None, math.inf

    def close(self) -> None:
        if self._transport is not None:
            self._flush()
            self._stop()
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._stop()
            if self._linger is not None:
                self._linger.cancel()
            self._transport.abort()
