"""Pacing: a load beside busy serving takes a bounded share of the time.

A load's steps (reading the model's files and config, creating its instances, freeing the
version it replaced) cost the requests served meanwhile more than their own CPU. In CPython
every hand-over of the GIL between a load thread and the event loop waits for a thread to be
woken, and a step hands it over at each file access and each call into the runtime: on the
2-core development machine a step cost serving about four times its CPU time, and a swap of
a small model halved throughput while it ran (docs/lifecycle.md). Pacing spreads that cost:
while requests are in flight, the step after one that took ``t`` seconds waits
``t * (1 - share) / share`` first, so the load's steps take at most ``share`` of the time. An
idle server loads at full speed, a load answers as soon as its last step is done, and a load a
request waits for (load on demand) is not paced.
"""

from __future__ import annotations

from asyncio import sleep
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TypeVar

T = TypeVar("T")

#: the longest wait before a step: a step that took very long (a large model made under
#: heavy load) does not hold the rest of its load back for twenty times as long
MAX_PAUSE_S = 2.0


class Pacer:
    """Runs a load's steps; while ``busy()`` says requests are served, a step waits until the
    steps before it are within their share of the time (no wait after the last step: the
    load answers as soon as its work is done)."""

    def __init__(self, share: float, busy: Callable[[], bool]) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be above 0 and at most 1, got {share}")
        self._share = share
        self._busy = busy
        self._next_at = 0.0  # when the next step may start, as the steps so far call for

    async def step(self, work: Callable[[], Awaitable[T]]) -> T:
        """Wait what the earlier steps call for (if serving is busy; time spent meanwhile,
        e.g. draining, counts), then start ``work`` and await it (a load cancelled while it
        waits never starts the step)."""
        wait = self._next_at - perf_counter()
        if wait > 0 and self._busy():
            await sleep(min(wait, MAX_PAUSE_S))
        started = perf_counter()
        result = await work()
        if self._share < 1:
            ended = perf_counter()
            self._next_at = ended + (ended - started) * (1 - self._share) / self._share
        return result


#: for loads that nothing may hold back
UNPACED = Pacer(1.0, lambda: False)
