"""Cancelling many tasks without holding the event loop: a dropped connection may leave tens
of thousands of requests in flight (1024 streams of ModelStreamInfer, each with up to
``--stream-max-requests`` requests), and each cancelled task unwinds on the loop (its
request leaves its model, its response stream closes). Cancelled all at once, they unwound
in one turn of the loop: 25,600 of them held it for 1-3 s, and every other client's health
check with it.

``cancel_in_slices`` queues the tasks on one canceller per event loop, which cancels at most
:data:`SLICE` of them per turn of the loop: each turn does a bounded amount of this work
(the slice cancelled in the previous turn unwinds), and whatever else is ready, a health
check included, runs in between. Requests of a dropped connection leave their models a few
turns later; one that finishes first is answered to nobody.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any

__all__ = ["SLICE", "cancel_in_slices"]

#: tasks cancelled per turn of the event loop (each unwinds in tens of microseconds)
SLICE = 64


class _Canceller:
    __slots__ = ("_loop", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: deque[asyncio.Future[Any]] = deque()
        self._scheduled = False

    def add(self, tasks: Iterable[asyncio.Future[Any]]) -> None:
        self._pending.extend(tasks)
        if self._pending and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._step)

    def _step(self) -> None:
        pending = self._pending
        for _ in range(min(SLICE, len(pending))):
            pending.popleft().cancel()
        if pending:  # the next slice in the next turn, after this one has unwound
            self._loop.call_soon(self._step)
        else:
            self._scheduled = False


_CANCELLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Canceller] = (
    weakref.WeakKeyDictionary()
)


def cancel_in_slices(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` (of the running loop), :data:`SLICE` per turn of the loop."""
    loop = asyncio.get_running_loop()
    canceller = _CANCELLERS.get(loop)
    if canceller is None:
        canceller = _CANCELLERS[loop] = _Canceller(loop)
    canceller.add(tasks)
