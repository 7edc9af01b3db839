"""FifoQueue: the queue of a model without dynamic batching — each request runs alone, in
arrival order. It has the DynamicBatcher's interface, so the dispatcher drives both alike.

A request's V2 ``timeout`` parameter (microseconds, from ``arrival``) is its queue deadline:
``expire`` takes the requests still queued at it (the driver answers them)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable

from inferplex.core.batch import Batch, CloseReason, PendingRequest


class FifoQueue:
    def __init__(self) -> None:
        self._queue: deque[PendingRequest] = deque()
        self._seq = 0
        self._timed = 0  # queued requests with a deadline: 0 keeps expire and wakeup O(1)
        self.close_reasons: Counter[CloseReason] = Counter()

    @property
    def pending_requests(self) -> int:
        return len(self._queue)

    def submit(self, request: PendingRequest, now: float) -> None:
        request.seq = self._seq
        self._seq += 1
        if request.timeout_us:
            request.deadline = request.arrival + request.timeout_us * 1e-6
            self._timed += 1
        self._queue.append(request)

    def next_batch(self, now: float, instance_idle: bool = True) -> Batch | None:
        if not instance_idle or not self._queue:
            return None
        request = self._queue.popleft()
        if request.deadline is not None:
            self._timed -= 1
        self.close_reasons[CloseReason.IDLE] += 1
        return Batch([request], request.rows, CloseReason.IDLE)

    def next_wakeup(self, now: float, instance_idle: bool = True) -> float | None:
        """Now, when a request waits for an idle instance; else the earliest deadline."""
        if instance_idle and self._queue:
            return now
        if not self._timed:
            return None
        return min(r.deadline for r in self._queue if r.deadline is not None)

    def expire(self, now: float) -> list[PendingRequest]:
        """Remove and return the queued requests whose deadline has come, in queue order."""
        if not self._timed:
            return []
        expired = [r for r in self._queue if r.deadline is not None and r.deadline <= now]
        if expired:
            self._queue = deque(r for r in self._queue if r.deadline is None or r.deadline > now)
            self._timed -= len(expired)
        return expired

    def withdraw(self, gone: Callable[[PendingRequest], bool]) -> int:
        """Remove the queued requests ``gone`` picks (their callers went away); returns how
        many."""
        left = [r for r in self._queue if not gone(r)]
        removed = len(self._queue) - len(left)
        if removed:
            self._timed -= sum(1 for r in self._queue if r.deadline is not None and gone(r))
            self._queue = deque(left)
        return removed

    def drain(self) -> list[PendingRequest]:
        drained = list(self._queue)
        self._queue.clear()
        self._timed = 0
        return drained
