"""The clocks of a server HTTP/2 connection, sans I/O: preface, idle, keepalive, maximum age
and stalled sends (http2_limits.py says what each limit is).

``Deadlines.check`` is given the time and what it needs of the connection (how many reads it
has had, whether its preface is in, its streams, those blocked on the peer's windows) and
answers what is due (``Due``): a graceful close for age, a keepalive PING, the end of the
connection (naming the limit), its abort (the peer reads nothing), the streams to cancel, and
when to look next. The connection (http2_base.py) arms one asyncio timer for that moment and
does what is due: nothing runs per frame.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from inferplex.transport.http2_limits import Http2Limits
from inferplex.transport.http2_stream import Stream


@dataclass(slots=True)
class Due:
    """What one look at the clocks found."""

    #: the next moment a look is needed (inf: none)
    wake: float = math.inf
    #: the maximum age is reached: a graceful close starts (counted as max_connection_age)
    goaway: bool = False
    #: a keepalive PING is to be sent
    ping: bool = False
    #: the connection ends (NO_ERROR) with this message ...
    end: str | None = None
    #: ... counted under this limit (None: not counted, the age's grace is over)
    limit: str | None = None
    #: the peer has read nothing for the send timeout: the connection is aborted
    abort: bool = False
    #: streams whose answers stood still on the peer's windows for the send timeout
    cancel: list[Stream] = field(default_factory=list)


class Deadlines:
    """One connection's clocks (times are the connection's loop's)."""

    def __init__(self, limits: Http2Limits) -> None:
        self._limits = limits
        self.born = 0.0
        #: since when no request is worked on or answered (stamped when the last stream ends)
        self.idle_since = 0.0
        self._idle_reads = 0
        self._ka_reads = 0
        self._ka_at = 0.0
        #: a keepalive PING is unanswered since then (None: none is)
        self.ping_sent_at: float | None = None
        #: the transport asked us to stop writing then (None: it did not)
        self.paused_at: float | None = None
        #: the maximum age is reached: open streams are cancelled at this moment
        self.age_deadline: float | None = None

    def start(self, now: float) -> None:
        self.born = self.idle_since = self._ka_at = now

    def check(
        self,
        now: float,
        reads: int,
        settled: bool,
        streams: Iterable[Stream],
        blocked: Iterable[Stream],
    ) -> Due:
        """What is due at ``now`` for a connection that has had ``reads`` reads, whose
        preface is in (``settled``) or not, with ``streams`` open and ``blocked`` waiting on
        the peer's windows."""
        due = Due()
        limits = self._limits
        if settled:
            self._settled(due, now, reads, streams)
        elif limits.preface_timeout_s:
            due.wake = at = self.born + limits.preface_timeout_s
            if now >= at:
                due.limit = "preface_timeout"
                due.end = f"no connection preface within {limits.preface_timeout_s:g} s"
        if due.end is None and limits.send_timeout_s:
            self._sends(due, now, limits.send_timeout_s, blocked)
        return due

    def _settled(self, due: Due, now: float, reads: int, streams: Iterable[Stream]) -> None:
        """Age, idle time, keepalive, once the preface is in; each may end the connection."""
        limits = self._limits
        if limits.max_connection_age_s:
            self._age(due, now, limits)
            if due.end is not None:
                return
        if limits.idle_timeout_s:
            self._idle(due, now, reads, limits.idle_timeout_s, streams)
            if due.end is not None:
                return
        if limits.keepalive_s:
            self._keepalive(due, now, reads, limits)

    def _age(self, due: Due, now: float, limits: Http2Limits) -> None:
        """The connection's maximum age: a graceful close once it is reached, and what is
        still open cancelled when its grace is over."""
        if self.age_deadline is None:
            at = self.born + limits.max_connection_age_s
            if now < at:
                due.wake = min(due.wake, at)
                return
            grace = limits.max_connection_age_grace_s
            self.age_deadline = now + grace if grace else math.inf
            due.goaway = True
        if now >= self.age_deadline:  # the grace is over: what is open is cancelled
            due.end = "maximum connection age reached"
            return
        due.wake = min(due.wake, self.age_deadline)

    def _idle(
        self, due: Due, now: float, reads: int, timeout: float, streams: Iterable[Stream]
    ) -> None:
        """Idle: no request the server works on or answers, and nothing read for a while
        (streams waiting on a peer that stopped sending their bodies hold nothing)."""
        if reads != self._idle_reads:
            self._idle_reads, self.idle_since = reads, now
        if any(stream.remote_closed for stream in streams):
            self.idle_since = now  # busy now: idle time counts from here at the most
            due.wake = min(due.wake, now + timeout)
            return
        at = self.idle_since + timeout
        if now >= at:
            due.limit, due.end = "idle_timeout", "idle for too long"
            return
        due.wake = min(due.wake, at)

    def _keepalive(self, due: Due, now: float, reads: int, limits: Http2Limits) -> None:
        """A PING after a quiet while, and the connection ended when its answer is late."""
        if reads != self._ka_reads:  # the peer sent something: it is there
            self._ka_reads, self._ka_at, self.ping_sent_at = reads, now, None
        if self.ping_sent_at is not None:
            at = self.ping_sent_at + limits.keepalive_timeout_s
            if now >= at:
                due.limit, due.end = "keepalive_timeout", "no answer to a keepalive PING"
                return
            due.wake = min(due.wake, at)
        elif now >= self._ka_at + limits.keepalive_s:
            due.ping = True
            self.ping_sent_at = now
            due.wake = min(due.wake, now + limits.keepalive_timeout_s)
        else:
            due.wake = min(due.wake, self._ka_at + limits.keepalive_s)

    def _sends(self, due: Due, now: float, timeout: float, blocked: Iterable[Stream]) -> None:
        """The send timeout of the connection and of each stream blocked on flow control."""
        if self.paused_at is not None:
            at = self.paused_at + timeout
            if now >= at:  # the peer reads nothing: what we wrote cannot leave
                due.abort = True
                return
            due.wake = min(due.wake, at)
        for stream in blocked:
            at = stream.stalled_since + timeout
            if now >= at:
                due.cancel.append(stream)
            else:
                due.wake = min(due.wake, at)
