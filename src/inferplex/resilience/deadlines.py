"""Deadlines: request timeouts with one timer for many requests.

``asyncio.timeout`` arms (and cancels) a loop timer per request: measured here at about three
times the cost of a whole trivial request. Requests of one model mostly share one timeout, so
their deadlines come in arrival order: a heap of (deadline, entry) with one timer armed at the
earliest live deadline is enough. Finished requests are only marked; the timer pops them
lazily when it fires, which happens about once per timeout period, not once per request.

At a deadline the waiting task is cancelled; :meth:`Deadlines.expired` tells the caller's
``except CancelledError`` that the cancellation was the timeout (and withdraws it from the
task's cancel count), so a cancellation from elsewhere still propagates, as with
``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools

#: finished entries are dropped from a heap larger than this once they are most of it
_COMPACT_ABOVE = 1024


class Deadline:
    """One request's deadline (loop time) and the task waiting for its answer."""

    __slots__ = ("active", "at", "fired", "task")

    def __init__(self, at: float, task: asyncio.Task[object]) -> None:
        self.at = at
        self.task = task
        self.active = True  # the request has not finished yet
        self.fired = False  # the deadline cancelled the task


class Deadlines:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties: first come, first expired
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._active = 0  # entries of the heap whose request is still running
        self.armed = 0  # how many timers were armed (tests, statistics)

    def start(self, timeout_s: float) -> Deadline:
        """The current task must have an answer within ``timeout_s``."""
        task = asyncio.current_task(self._loop)
        assert task is not None, "deadlines apply to tasks"
        at = self._loop.time() + timeout_s
        entry = Deadline(at, task)
        heapq.heappush(self._heap, (at, next(self._order), entry))
        self._active += 1
        if self._timer is None or at < self._timer_at:
            self._arm(at)
        return entry

    def finish(self, entry: Deadline) -> None:
        """The request is answered (or failed): its deadline no longer matters."""
        if not entry.active:
            return
        entry.active = False
        self._active -= 1
        heap = self._heap
        # finished entries wait in the heap until the timer passes them: with a long timeout
        # and many requests that is many entries, so drop them once they are most of it
        if len(heap) > _COMPACT_ABOVE and len(heap) > 4 * self._active:
            self._heap = [item for item in heap if item[2].active]
            heapq.heapify(self._heap)

    def expired(self, entry: Deadline) -> bool:
        """In ``except CancelledError``: whether the deadline was the cancellation (then it is
        withdrawn from the task and the caller raises its timeout error instead)."""
        self.finish(entry)
        return entry.fired and entry.task.uncancel() == 0

    def __len__(self) -> int:
        """Entries held (finished ones included until they are dropped)."""
        return len(self._heap)

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._fire)
        self._timer_at = at
        self.armed += 1

    def _fire(self) -> None:
        self._timer = None
        now = self._loop.time()
        heap = self._heap
        while heap and (heap[0][0] <= now or not heap[0][2].active):
            entry = heapq.heappop(heap)[2]
            if entry.active:
                entry.fired = True
                entry.active = False
                self._active -= 1
                entry.task.cancel()
        if heap:
            self._arm(heap[0][0])
