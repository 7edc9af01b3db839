"""What every part of a server HTTP/2 connection (transport/http2.py) shares: its state, the
asyncio callbacks and timer, writing, the budgets of work a client may make it do for
nothing, and closing (http2_limits.py says what each limit is; two parts are sans I/O: its
clocks, http2_deadlines.py, and its receive windows and buffered bytes, http2_flow.py).

Nothing here runs per frame on the happy path but a counter: a budget is looked at against
the clock only once its counter passes its burst.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from inferplex.transport.http2_budget import FrameBudget
from inferplex.transport.http2_deadlines import Deadlines
from inferplex.transport.http2_flow import ReceiveFlow
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_stream import Http2App, Stream
from inferplex.transport.http2_wire import (
    CANCEL,
    DEFAULT_WINDOW,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    MAX_WINDOW,
    MIN_FRAME_SIZE,
    NO_ERROR,
    PING,
    RST_STREAM,
    U32,
    Http2Error,
    frame,
)

logger = logging.getLogger(__name__)

_U32 = U32

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
        #: receiving: windows and buffered bytes (sans I/O: its frames go to ``_write``)
        self.flow = ReceiveFlow(limits, counters, self._write, self._buffers_full, self._granted)
        #: the stream whose DATA payload is being read
        self._data_stream: Stream | None = None
        self._settings_acked = False  # the peer acknowledged our SETTINGS
        # budgets: frames that did no work, and streams reset or refused
        self._resets = FrameBudget(limits.max_resets, limits.resets_per_s)
        self._control = FrameBudget(limits.max_control_frames, limits.control_frames_per_s)
        # timers: the clocks (sans I/O), and the one asyncio timer that looks at them
        self._deadlines = Deadlines(limits)
        self._reads = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
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
        self._deadlines.start(now)
        self._resets.since = self._control.since = now
        self._check(now)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None and self in self._connections:
            self._counters.connections -= 1
        self._closed = True
        for handle in (self._draining, self._timer, self._linger):
            if handle is not None:
                handle.cancel()
        self._connections.discard(self)
        self._drop_streams()

    def pause_writing(self) -> None:
        # the peer is not reading: stop taking requests until the socket drains
        if self._transport is not None:
            self._transport.pause_reading()
        if self._limits.send_timeout_s and self._loop is not None:
            self._deadlines.paused_at = now = self._loop.time()
            self._arm(now + self._limits.send_timeout_s)

    def resume_writing(self) -> None:
        self._deadlines.paused_at = None
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

    # -- timers (what is due: Deadlines, http2_deadlines.py) -------------------------------
    def _arm(self, at: float) -> None:
        """Make sure the connection's timer looks at it no later than ``at``."""
        if at >= self._timer_at or self._loop is None or self._closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        if not self._closed and self._loop is not None:
            self._check(self._loop.time())

    def _check(self, now: float) -> None:
        """Do what is due at ``now``, and arm the timer for the next look."""
        due = self._deadlines.check(
            now, self._reads, self._settings_seen, self.streams.values(), self._blocked.values()
        )
        exceeded = self._counters.exceeded
        if due.goaway:
            exceeded["max_connection_age"] += 1
            self.goaway()
        if due.ping:
            self._write(frame(PING, 0, 0, _KEEPALIVE_PING))
        if due.end is not None:
            if due.limit is not None:
                exceeded[due.limit] += 1
            self._fail(NO_ERROR, due.end)
            return
        if due.abort:  # the peer reads nothing: what we wrote cannot leave
            exceeded["send_timeout"] += 1
            self._drop_streams()
            self.abort()
            return
        for stream in due.cancel:
            exceeded["send_timeout"] += 1
            self._reset(stream, CANCEL)
        if due.wake < math.inf:
            self._arm(max(due.wake, now + _TICK_S))

    # -- streams closed early, writing -----------------------------------------------------
    def _reset(self, stream: Stream, code: int) -> None:
        stream.discard = True
        self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(code)))
        self._closed_early(stream.id)
        self.streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        self.flow.release(stream)
        if not self.streams and self._loop is not None:
            self._deadlines.idle_since = self._loop.time()
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

    # -- receive windows and buffered bytes: ReceiveFlow (http2_flow.py) -------------------
    def _buffers_full(self, stream: Stream, server_wide: bool) -> None:
        self._app.buffers_full(self, stream, server_wide)

    def _granted(self, stream: Stream) -> None:
        """A stream waiting for room got it: its window opens for the rest of its message
        (at the end of its DATA frame if that is being read: ``_data_end``)."""
        if stream is not self._data_stream:
            self.flow.open(stream, stream.head_size + stream.reserved - stream.body_bytes)

    def expect(self, stream: Stream, due: int) -> None:
        """A streaming call's message is ``due`` bytes short of whole: its window opens for
        them (a message larger than the window would wait for itself otherwise); whole
        messages still wait to be taken before the window opens for the next."""
        if (
            stream is not self._data_stream
            and not stream.remote_closed
            and self.streams.get(stream.id) is stream
        ):
            self.flow.open(stream, due)

    def taken(self, stream: Stream, count: int) -> None:
        """A streaming call's application took ``count`` bytes of the body held for it: no
        longer buffered, and the stream's window gets them back, so the peer may send more
        (until it does, a peer whose messages are not taken is held back by flow control). A
        message is a request's work, as a stream is: it gives back the control frames an
        answered stream gives back (the peer's WINDOW_UPDATEs and PINGs follow the answers)."""
        self._earn(_STREAM_REFUND)
        self.flow.taken(stream, count)

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
        if self._peer_leaving or (self._deadlines.age_deadline is not None and self._goaway_sent):
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
        self.flow.waiting.clear()
        self._blocked.clear()
        release = self.flow.release
        for stream in streams.values():
            release(stream)
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
