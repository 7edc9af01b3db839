"""Adaptive batching: batch size and queue delay chosen online to hold a latency target.

For a model with ``scheduling { slo_p99_ms: T adaptive_batching: true }`` the model asks
this pure policy, after every few batches, for the largest batch and the longest queue delay
that still keep a request's worst latency under the target, using the execution time the
model has shown per batch size (ExecutionEstimator). The worst case counted is a request
that arrives just after a batch started: it waits for that batch, then the queue delay, then
runs in the next batch — ``2 x exec(rows) + delay``. Among the sizes that fit, the largest is
taken, since per-row cost falls with batch size on the models this serves; a safety margin
leaves room for what the estimate does not see (the frontend, the other models).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferplex.core.estimator import ExecutionEstimator

if TYPE_CHECKING:
    from inferplex.core.batcher import DynamicBatcher

#: share of the target the batch plan may use; the rest is headroom
HEADROOM = 0.8


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_rows: int
    max_delay_s: float


def plan_limits(
    estimator: ExecutionEstimator, target_s: float, max_batch_size: int, configured_delay_s: float
) -> BatchLimits | None:
    """The limits to batch with now; None while nothing is measured (keep the config's)."""
    budget = target_s * HEADROOM
    if estimator.estimate(1) is None:
        return None
    best = 1
    for rows in range(1, max_batch_size + 1):
        cost = estimator.estimate(rows)
        if cost is not None and 2 * cost <= budget:
            best = rows
    worst = 2 * (estimator.estimate(best) or 0.0)
    # Waiting lets batches fill; never wait longer than the config allows, nor past the budget.
    room = max(budget - worst, 0.0)
    delay = min(room, configured_delay_s) if configured_delay_s > 0 else room
    return BatchLimits(best, delay)


#: batches between two re-plans: enough for the estimate to move, cheap on the event loop
REPLAN_EVERY = 16


class AdaptiveBatching:
    """Re-plans a batcher's limits from its model's measured execution times, every
    ``REPLAN_EVERY`` batches. Lives on the event loop, like the batcher it steers."""

    def __init__(
        self,
        batcher: DynamicBatcher,
        estimator: ExecutionEstimator,
        target_s: float,
        max_batch_size: int,
        configured_delay_s: float,
    ) -> None:
        self._batcher = batcher
        self._estimator = estimator
        self._target_s = target_s
        self._max_batch_size = max_batch_size
        self._configured_delay_s = configured_delay_s
        self._batches = 0

    def batch_done(self) -> None:
        self._batches += 1
        if self._batches < REPLAN_EVERY:
            return
        self._batches = 0
        limits = plan_limits(
            self._estimator, self._target_s, self._max_batch_size, self._configured_delay_s
        )
        if limits is not None:
            self._batcher.set_limits(limits.max_rows, limits.max_delay_s)
