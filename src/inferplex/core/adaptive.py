"""What the ``adaptive`` settings steer online to hold a latency target: pure policies, driven
by the batcher and the scheduler that own them.

**Adaptive batching.** For a model with ``scheduling { slo_p99_ms: T adaptive_batching: true }``
the model asks :func:`plan_limits`, after every few batches, for the largest batch and the
longest queue delay that still keep a request's worst latency under the target, using the
execution time the model has shown per batch size (ExecutionEstimator). The worst case counted
is a request that arrives just after a batch started: it waits for that batch, then the queue
delay, then runs in the next batch — ``2 x exec(rows) + delay``. Among the sizes that fit, the
largest is taken, since per-row cost falls with batch size on the models this serves; a safety
margin leaves room for what the estimate does not see (the frontend, the other models).

**The SLO guard** (:class:`SloGuard`, the ``adaptive`` scheduling policy). Choosing which batch
starts cannot hold a target by itself: once a batch of a model without a target runs, its
threads take a share of the cores from the model with one (on two cores the flooding model's
execution, the server's event loop and the important model's execution all compete). So while
a model with a target is active and its p99 is not comfortably under it, the models without a
target may only use a *share* of the compute they could otherwise: their batches are paced, each
start pushing the next one back by its estimated cost divided by the share (corrected to the
measured cost when it finishes), so between their batches the cores are left to the models
with a target. The share is cut by half at each adjustment where the worst p99 / target among
the models with a target is above the aim, grows back by a small step while it is well under,
and holds in between; it never falls below :data:`MIN_SHARE`, so a flooding model slows to a
trickle (at the minimum a batch that ran for c seconds, measured on the wall clock, is followed
by 63 c without one) but is never starved.
"""

from __future__ import annotations

import math
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


#: SLO guard: the share of their compute the models without a target keep at least
MIN_SHARE = 1 / 64
#: SLO guard: the share x CUT at an adjustment above the aim, + RELEASE at one well under
CUT = 0.5
RELEASE = 0.05


class SloGuard:
    """Paces the batches of the models without a latency target while those with one are in
    trouble (see the module docstring). Pure: every call that needs time takes ``now``."""

    __slots__ = ("_capacity", "resume_at", "share")

    def __init__(self, capacity: int) -> None:
        #: executions the paced models may run at once unpaced (the scheduler's slots less the
        #: one it reserves): a share of 1 is that many cores' worth of batches
        self._capacity = capacity
        #: the fraction of ``capacity`` the paced models may use; 1: not pacing
        self.share = 1.0
        #: the earliest moment a paced model may start its next batch
        self.resume_at = -math.inf

    @property
    def pacing(self) -> bool:
        return self.share < 1.0

    def steer(self, worst: float, aim: float, well_under: float) -> None:
        """Adjust the share by ``worst``: the highest p99 / target among the active models with
        a target, against the ``aim`` and ``well_under`` fractions of the target."""
        if worst > aim:
            self.share = max(self.share * CUT, MIN_SHARE)
        elif worst < well_under:
            self.share = min(self.share + RELEASE, 1.0)

    def allows(self, now: float) -> bool:
        """Whether a paced model may start a batch at ``now``."""
        return now >= self.resume_at

    def charge(self, now: float, estimate: float) -> float:
        """A paced batch estimated to run ``estimate`` seconds starts at ``now``: push the next
        start back. Returns the rate charged, for :meth:`settle`."""
        rate = self.share * self._capacity
        self.resume_at = max(self.resume_at, now) + estimate / rate
        return rate

    def settle(self, rate: float, estimate: float, cost: float) -> None:
        """A paced batch charged at ``rate`` finished after ``cost`` seconds: correct its
        charge from the estimate to what it used."""
        self.resume_at += (cost - estimate) / rate
