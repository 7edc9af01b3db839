"""What the scheduler keeps per registered model: its policy (from its config), its share of
compute (virtual time, executions) and, for the ``adaptive`` policy, its latency window and
the boost of its weight that the window steers (``core/scheduler.py`` says how they are used).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from inferplex.core.resources import Needs

#: adaptive: latencies kept per model, by count and by age (seconds)
LATENCY_WINDOW = 256
LATENCY_HORIZON_S = 5.0
#: adaptive: seconds between two weight adjustments of one model
ADJUST_INTERVAL_S = 0.05
#: adaptive: the p99 the policy steers to, as a fraction of the target (headroom for the lag)
AIM = 0.9
#: adaptive: effective weight x RAISE while above the aim, bounded by MAX_BOOST x base
RAISE = 1.25
MAX_BOOST = 16.0
#: adaptive: below WELL_UNDER x target the boost decays by DECAY per adjustment, down to 1
WELL_UNDER = 0.7
DECAY = 0.9


@dataclass(frozen=True)
class ModelPolicy:
    """How one registered model takes part in scheduling (from its config)."""

    weight: float = 1.0
    """``priority`` / ``adaptive``: relative share of compute time; larger = more important."""
    slo_p99_ms: float | None = None
    """``adaptive``: latency target for the p99 of the model's requests, in milliseconds."""
    resources: Mapping[str, int] = field(default_factory=dict)
    """Rate-limiter tokens one execution of the model holds while it runs."""
    resource_priority: int = 0
    """Triton's ``rate_limiter.priority``: among tied candidates, 2 gets half the turns of 1."""


class ModelState:
    """Accounting for one registered model."""

    __slots__ = (
        "boost",
        "compute_s",
        "est_cost",
        "executions",
        "key",
        "last_adjust",
        "last_arrival",
        "latencies",
        "latency_times",
        "missing",
        "needs",
        "policy",
        "priority",
        "ratio",
        "running",
        "seen",
        "targeted",
        "turns",
        "vtime",
        "weight",
    )

    def __init__(self, key: str, policy: ModelPolicy, needs: Needs) -> None:
        self.key = key
        self.vtime = 0.0
        self.running = 0
        self.executions = 0
        self.compute_s = 0.0
        self.est_cost: float | None = None
        self.seen = -1  # the pick() epoch in which the model was last a candidate
        self.last_arrival = -math.inf
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.latency_times: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.boost = 1.0  # adaptive: effective weight / base weight
        self.missing = False  # adaptive: p99 above the aim at the last adjustment
        self.ratio = 0.0  # adaptive: p99 / target at the last adjustment
        self.last_adjust = -math.inf
        self.configure(policy, needs)

    def configure(self, policy: ModelPolicy, needs: Needs) -> None:
        self.policy = policy
        self.needs = needs
        self.priority = max(policy.resource_priority, 1)  # Triton treats 0 as 1
        self.targeted = policy.slo_p99_ms is not None
        self.turns = self.executions * self.priority  # Triton's tie-break: smaller goes first
        self.set_boost(self.boost)

    def set_boost(self, boost: float) -> None:
        self.boost = boost
        self.weight = self.policy.weight * boost  # effective weight, read on every pick

    def record(self, now: float, latencies_s: Sequence[float]) -> None:
        """Add a batch's request latencies to the window and drop those past its horizon."""
        if latencies_s:
            self.latencies.extend(latencies_s)
            self.latency_times.extend(repeat(now, len(latencies_s)))
        horizon = now - LATENCY_HORIZON_S
        times = self.latency_times
        while times and times[0] < horizon:
            times.popleft()
            self.latencies.popleft()

    def due_to_steer(self, now: float) -> bool:
        """``adaptive``: whether the model has a target and its boost may be adjusted now."""
        return self.targeted and now - self.last_adjust >= ADJUST_INTERVAL_S

    def steer(self, now: float) -> bool:
        """``adaptive``: raise the boost while the p99 is above the aim, decay it while well
        under the target; False while no latency is known."""
        p99 = self.p99()
        target = self.policy.slo_p99_ms
        if p99 is None or target is None:
            return False
        self.last_adjust = now
        self.ratio = p99 / (target / 1000.0)
        self.missing = self.ratio > AIM
        if self.missing:
            self.set_boost(min(self.boost * RAISE, MAX_BOOST))
        elif self.ratio < WELL_UNDER:
            self.set_boost(max(self.boost * DECAY, 1.0))
        return True

    def p99(self) -> float | None:
        """Nearest-rank p99 of the latencies in the window, in seconds."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[math.ceil(0.99 * len(ordered)) - 1]
