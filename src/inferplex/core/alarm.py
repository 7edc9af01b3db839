"""Alarm: the dispatcher's one pending wake-up, kept to tens of microseconds.

The event loop's timers are not fine enough for a batcher's queue delay. uvloop counts its
timers in whole milliseconds: a 200 µs ``call_at`` fires after about 50 µs, a 600 µs one after
1.1 ms. Fired early, the dispatcher finds the delay not over and arms again, spinning the loop
until it is (a bare loop: 95 wake-ups and 198 µs of CPU for one 200 µs wait; served add_sub
at concurrency 1 with a 200 µs delay took 336 µs of CPU a request, 158 without the delay).
So a wait shorter than ``THREAD_BELOW_S`` is kept by a thread that sleeps until the moment
(a timed condition wait, with Linux's timer slack at its finest) and hands the wake-up to the
loop with one ``call_soon_threadsafe``; longer waits stay on the loop's timers, whose error is
small beside them (a wake-up that comes early by more than ``EARLY_OK_S`` leaves the rest to
the thread). The hand-over from the thread takes its time (about 90 µs on the development
machine): the thread learns how long and wakes that much before the moment, and ``fire``
gets the moment itself, so that the dispatcher acts as at that moment when it comes a few
microseconds early.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import threading
import time
from collections.abc import Callable

#: waits shorter than this go to the thread (the loop's timers err by up to a millisecond)
THREAD_BELOW_S = 0.002
#: a wake-up this close before its moment counts as on time
EARLY_OK_S = 0.0001
#: the most the thread wakes before the moment to make up for the hand-over
MAX_LEAD_S = 0.0002

_now = time.perf_counter


class Alarm:
    """Calls ``fire(moment)`` on the loop at the moment last ``set`` (``time.perf_counter``
    seconds), once; a new ``set`` or ``cancel`` replaces what was pending."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fire: Callable[[float], None]) -> None:
        self._loop = loop
        self._fire = fire
        #: the moment pending, math.inf when none
        self.at = math.inf
        self._generation = 0  # a wake-up handed over for an older setting is dropped
        self._handle: asyncio.TimerHandle | None = None
        self._cond = threading.Condition()
        self._thread_at = math.inf  # the moment the thread waits for (under _cond)
        self._lead = 0.0  # how long the hand-over from the thread takes, learned
        self._woken = math.inf  # the moment the thread was last asked to wake at
        self._thread: threading.Thread | None = None
        self._closed = False

    def set(self, at: float, now: float) -> None:
        """Fire at ``at`` (``now`` is the caller's reading of the same clock)."""
        self.cancel()
        self.at = at
        if at - now >= THREAD_BELOW_S:
            self._handle = self._loop.call_at(
                self._loop.time() + (at - now), self._fired, self._generation
            )
            return
        wake = self._woken = at - self._lead
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._wait, name="inferplex-alarm", daemon=True
                )
                self._thread.start()
            self._thread_at = wake
            self._cond.notify()

    def cancel(self) -> None:
        self._generation += 1
        self.at = math.inf
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._thread_at != math.inf:
            with self._cond:
                self._thread_at = math.inf

    def close(self) -> None:
        """Stop the thread; what it waited for is not handed over (blocking: call it off the
        loop, with nothing left to wait for)."""
        with self._cond:
            self._closed = True
            self._thread_at = math.inf
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _fired(self, generation: int) -> None:
        if generation != self._generation:
            return  # set again or cancelled since
        now = _now()
        if self._handle is None:  # from the thread: learn how long the hand-over took
            took = min(max(now - self._woken, 0.0), MAX_LEAD_S)
            self._lead += 0.2 * (took - self._lead)
        self._handle = None
        at = self.at
        if at - now > EARLY_OK_S:  # a loop timer that came early: the thread keeps the rest
            self.set(at, now)
            return
        self.at = math.inf
        self._fire(at)

    def _wait(self) -> None:
        _fine_timer_slack()
        cond, call_soon = self._cond, self._loop.call_soon_threadsafe
        with cond:
            while not self._closed:
                at = self._thread_at
                if at == math.inf:
                    cond.wait()
                    continue
                rest = at - _now()
                if rest > 0:
                    cond.wait(rest)
                    continue
                self._thread_at = math.inf
                call_soon(self._fired, self._generation)


def _fine_timer_slack() -> None:
    """Ask Linux to wake this thread on time: by default a timed wait may end up to 50 µs
    late (the timer slack), a quarter of a 200 µs delay. Elsewhere: nothing to do."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_PR_SET_TIMERSLACK = 29
