"""FifoQueue: the queue of a model without dynamic batching — each request runs alone, in
arrival order. It has the DynamicBatcher's interface, so the dispatcher drives both alike."""

from __future__ import annotations

from collections import Counter, deque

from inferplex.core.batcher import Batch, CloseReason, PendingRequest


class FifoQueue:
    def __init__(self) -> None:
        self._queue: deque[PendingRequest] = deque()
        self._seq = 0
        self.close_reasons: Counter[CloseReason] = Counter()

    @property
    def pending_requests(self) -> int:
        return len(self._queue)

    def submit(self, request: PendingRequest, now: float) -> None:
        request.seq = self._seq
        self._seq += 1
        self._queue.append(request)

    def next_batch(self, now: float, instance_idle: bool = True) -> Batch | None:
        if not instance_idle or not self._queue:
            return None
        request = self._queue.popleft()
        self.close_reasons[CloseReason.IDLE] += 1
        return Batch([request], request.rows, CloseReason.IDLE)

    def next_wakeup(self, now: float, instance_idle: bool = True) -> float | None:
        """Now, when a request waits for an idle instance; no timer is ever needed."""
        return now if instance_idle and self._queue else None

    def expire(self, now: float) -> list[PendingRequest]:
        return []

    def drain(self) -> list[PendingRequest]:
        drained = list(self._queue)
        self._queue.clear()
        return drained
