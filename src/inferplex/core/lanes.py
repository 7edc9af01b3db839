"""LaneQueue: the batch queue of a model whose requests are pinned to instances.

A stateful model's sequence stays on one instance from its start to its end, as Triton gives
each sequence a batch slot of one instance: a model may keep a sequence's state in the
instance's own memory (a Triton Python model's dict keyed by correlation id, a backend's
cache), so each next request must reach that same instance. Each instance has its own lane —
a queue with the model's batching policy — and a batch is formed from one lane and runs on
that lane's instance (``Batch.lane``). The dispatcher sees one queue, due when a lane whose
instance is idle is due. Like the policies it holds, it has no clock of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from inferplex.core.batch import Batch, CloseReason, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.core.fifo import FifoQueue

Lane = DynamicBatcher | FifoQueue


class LaneQueue:
    """One queue per instance; ``PendingRequest.lane`` says which a request joins.
    ``instances`` and ``idle`` are the execution's own lists (lane i runs on instances[i])."""

    def __init__(self, lanes: Sequence[Lane], instances: list[Any], idle: list[Any]) -> None:
        self._lanes = list(lanes)
        self._instances = instances
        self._idle = idle
        #: why batches closed, counted over every lane
        self.close_reasons: Counter[CloseReason] = Counter()
        for lane in self._lanes:
            lane.close_reasons = self.close_reasons
        self._first = 0  # the lane looked at first for the next batch: lanes take turns

    @property
    def pending_requests(self) -> int:
        return sum(lane.pending_requests for lane in self._lanes)

    def submit(self, request: PendingRequest, now: float) -> None:
        """Queue ``request`` in its lane (raises as the lane's policy does)."""
        self._lanes[request.lane].submit(request, now)

    def _lane_idle(self, index: int) -> bool:
        return self._instances[index] in self._idle

    def next_batch(self, now: float, instance_idle: bool = True) -> Batch | None:
        """The next due batch of a lane whose instance is idle, marked with its lane."""
        if not instance_idle:
            return None
        count = len(self._lanes)
        for step in range(count):
            index = (self._first + step) % count
            if not self._lane_idle(index):
                continue
            batch = self._lanes[index].next_batch(now, True)
            if batch is not None:
                batch.lane = index
                self._first = (index + 1) % count
                return batch
        return None

    def next_wakeup(self, now: float, instance_idle: bool = True) -> float | None:
        """The earliest moment a lane needs attention: its queue delay only while its own
        instance is idle, its deadlines always."""
        wake: float | None = None
        for index, lane in enumerate(self._lanes):
            at = lane.next_wakeup(now, instance_idle and self._lane_idle(index))
            if at is not None and (wake is None or at < wake):
                wake = at
        return wake

    def expire(self, now: float) -> list[PendingRequest]:
        expired: list[PendingRequest] = []
        for lane in self._lanes:
            expired += lane.expire(now)
        return expired

    def withdraw(self, gone: Callable[[PendingRequest], bool]) -> int:
        return sum(lane.withdraw(gone) for lane in self._lanes)
