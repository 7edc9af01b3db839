"""The queues of a dynamic batcher's priority levels (Triton's ``priority_levels`` and queue
policies): requests in time, and those a DELAY policy moved behind them."""

from __future__ import annotations

from collections import deque

from inferplex.config.model_config import DynamicBatching, QueuePolicy
from inferplex.core.batch import PendingRequest


class Level:
    """The queue of one priority level: requests in time (``live``) and timed-out ones that a
    DELAY policy moved behind them (``delayed``)."""

    __slots__ = (
        "allow_override",
        "delayed",
        "live",
        "max_size",
        "number",
        "reject",
        "timed",
        "timeout_us",
    )

    def __init__(self, number: int, policy: QueuePolicy) -> None:
        self.number = number
        self.reject = policy.timeout_action == "REJECT"
        self.timeout_us = policy.default_timeout_microseconds
        self.allow_override = policy.allow_timeout_override
        self.max_size = policy.max_queue_size
        self.live: deque[PendingRequest] = deque()
        self.delayed: deque[PendingRequest] = deque()
        self.timed = 0  # requests in ``live`` with a deadline: 0 lets the scans skip the level

    def take_expired(self, now: float) -> list[PendingRequest]:
        """Remove and return the live requests whose deadline has come, in queue order."""
        if not self.timed:
            return []
        expired = [r for r in self.live if r.deadline is not None and r.deadline <= now]
        if expired:
            kept = [r for r in self.live if r.deadline is None or r.deadline > now]
            self.live.clear()
            self.live.extend(kept)
            self.timed -= len(expired)
        return expired


def build_levels(config: DynamicBatching) -> list[Level]:
    """The levels' queues; DynamicBatching has already checked the levels are in range."""
    default = config.default_queue_policy or QueuePolicy()
    n = config.priority_levels
    if not n:
        # Triton: without priority levels only the default policy applies
        return [Level(0, default)]
    return [Level(i, config.priority_queue_policy.get(i, default)) for i in range(1, n + 1)]
