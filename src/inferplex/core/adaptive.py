"""Adaptive batching: batch size and queue delay chosen online to hold a latency target.

For a model with ``scheduling { slo_p99_ms: T adaptive_batching: true }`` the dispatcher asks
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

from inferplex.core.estimator import ExecutionEstimator

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
