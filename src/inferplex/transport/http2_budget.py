"""The budgets of work an HTTP/2 client may make a connection do for nothing (frames that
do no work, streams reset or refused): a leaky bucket each, sans I/O (the caller passes the
clock), as nghttp2 and grpc-core keep them (http2_limits.py says what each limit is)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Clock", "FrameBudget"]


class Clock(Protocol):
    """What tells the time (the event loop; a test's fake clock)."""

    def time(self) -> float: ...


class FrameBudget:
    """``burst`` frames at once, then ``rate`` per second. Work done for the peer gives room
    back: ``earn`` up to one burst ahead, ``give_back`` down to none spent."""

    __slots__ = ("burst", "count", "rate", "since")

    def __init__(self, burst: int, rate: float) -> None:
        self.burst = burst
        self.rate = rate
        #: frames spent and not leaked; below 0: earned ahead (at most one burst)
        self.count = 0
        #: when the bucket last leaked
        self.since = 0.0

    def spend(self, clock: Clock | None) -> bool:
        """One frame more; False when it is past the budget, even after what leaked since
        the last look (read from ``clock`` only then; None: nothing leaks)."""
        self.count += 1
        if self.count <= self.burst:
            return True
        now = clock.time() if clock is not None else self.since
        drained = int((now - self.since) * self.rate)
        if self.count <= drained:
            self.count, self.since = 0, now
        else:
            self.count -= drained
            self.since = self.since + drained / self.rate if self.rate else now
        return self.count <= self.burst

    def earn(self, frames: int) -> None:
        """Room for ``frames`` more, up to one burst ahead."""
        count = self.count - frames
        floor = -self.burst
        self.count = count if count > floor else floor

    def give_back(self) -> None:
        """One frame spent is given back (none below zero)."""
        if self.count > 0:
            self.count -= 1
