"""The timers of a server HTTP/2 connection (transport/http2.py): preface, idle, keepalive,
maximum age and stalled sends.

They are one TimerHandle per connection, armed for the earliest moment one of them needs a
look: nothing runs per frame.
"""

from __future__ import annotations

import asyncio
import math

from inferplex.transport.http2_base import _KEEPALIVE_PING, _TICK_S, Http2Base
from inferplex.transport.http2_limits import Http2Limits
from inferplex.transport.http2_wire import CANCEL, NO_ERROR, PING, frame


class Http2Timers(Http2Base):
    """A server connection's timers (Http2Output adds sending)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self._loop is not None
        self._check(self._loop.time())

    def pause_writing(self) -> None:
        # the peer is not reading: stop taking requests until the socket drains
        if self._transport is not None:
            self._transport.pause_reading()
        if self._limits.send_timeout_s and self._loop is not None:
            self._paused_at = now = self._loop.time()
            self._arm(now + self._limits.send_timeout_s)

    def resume_writing(self) -> None:
        self._paused_at = None
        if self._transport is not None and not self._closed:
            self._transport.resume_reading()

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
        """Act on every timeout due at ``now``, and arm the timer for the next."""
        limits = self._limits
        if self._settings_seen:
            wake = self._check_settled(now, limits)
        else:
            wake = self._check_preface(now, limits)
        if self._closed:
            return
        if limits.send_timeout_s:
            send_wake = self._check_send(now, limits.send_timeout_s)
            if send_wake is None:
                return
            wake = min(wake, send_wake)
        if wake < math.inf:
            self._arm(max(wake, now + _TICK_S))

    def _check_preface(self, now: float, limits: Http2Limits) -> float:
        """``_check`` before the preface is in; the moment its clock runs out."""
        if not limits.preface_timeout_s:
            return math.inf
        at = self._born + limits.preface_timeout_s
        if now >= at:
            message = f"no connection preface within {limits.preface_timeout_s:g} s"
            self._time_out("preface_timeout", message)
        return at

    def _check_send(self, now: float, timeout: float) -> float | None:
        """The send timeout of the connection and of each stream blocked on flow control;
        the next moment one of them needs a look (None: the connection was aborted)."""
        wake = math.inf
        if self._paused_at is not None:
            at = self._paused_at + timeout
            if now >= at:  # the peer reads nothing: what we wrote cannot leave
                self._counters.exceeded["send_timeout"] += 1
                self._drop_streams()
                self.abort()
                return None
            wake = at
        for stream in list(self._blocked.values()):
            at = stream.stalled_since + timeout
            if now >= at:
                self._counters.exceeded["send_timeout"] += 1
                self._reset(stream, CANCEL)
            else:
                wake = min(wake, at)
        return wake

    def _check_settled(self, now: float, limits: Http2Limits) -> float:
        """``_check`` once the preface is in: age, idle time, keepalive; the next moment
        one of them needs a look."""
        wake = math.inf
        if limits.max_connection_age_s:
            at = self._check_age(now, limits)
            if at is None:
                return wake
            wake = at
        if limits.idle_timeout_s:
            at = self._check_idle(now, limits.idle_timeout_s)
            if at is None:
                return wake
            wake = min(wake, at)
        if limits.keepalive_s:
            at = self._check_keepalive(now, limits)
            if at is None:
                return wake
            wake = min(wake, at)
        return wake

    def _check_age(self, now: float, limits: Http2Limits) -> float | None:
        """The connection's maximum age: a graceful close once it is reached, and what is
        still open cancelled when its grace is over (None: it was)."""
        if self._age_deadline is None:
            at = self._born + limits.max_connection_age_s
            if now < at:
                return at
            self._counters.exceeded["max_connection_age"] += 1
            grace = limits.max_connection_age_grace_s
            self._age_deadline = now + grace if grace else math.inf
            self.goaway()
        if now >= self._age_deadline:  # the grace is over: what is open is cancelled
            self._fail(NO_ERROR, "maximum connection age reached")
            return None
        return self._age_deadline

    def _check_idle(self, now: float, timeout: float) -> float | None:
        """Idle: no request the server works on or answers, and nothing read for a while
        (streams waiting on a peer that stopped sending their bodies hold nothing).
        None: the connection timed out."""
        if self._reads != self._idle_reads:
            self._idle_reads, self._idle_since = self._reads, now
        if any(stream.remote_closed for stream in self.streams.values()):
            self._idle_since = now  # busy now: idle time counts from here at the most
            return now + timeout
        at = self._idle_since + timeout
        if now >= at:
            self._time_out("idle_timeout", "idle for too long")
            return None
        return at

    def _check_keepalive(self, now: float, limits: Http2Limits) -> float | None:
        """A PING after a quiet while, and the connection failed when its answer is late
        (None: it was)."""
        if self._reads != self._ka_reads:  # the peer sent something: it is there
            self._ka_reads, self._ka_at, self._ping_sent_at = self._reads, now, None
        if self._ping_sent_at is not None:
            at = self._ping_sent_at + limits.keepalive_timeout_s
            if now >= at:
                self._time_out("keepalive_timeout", "no answer to a keepalive PING")
                return None
            return at
        if now >= self._ka_at + limits.keepalive_s:
            self._write(frame(PING, 0, 0, _KEEPALIVE_PING))
            self._ping_sent_at = now
            return now + limits.keepalive_timeout_s
        return self._ka_at + limits.keepalive_s

    def _time_out(self, limit: str, message: str) -> None:
        self._counters.exceeded[limit] += 1
        self._fail(NO_ERROR, message)
