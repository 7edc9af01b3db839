"""Graceful degradation: which variant of a model (FP32 first, then faster ones such as INT8)
answers a request.

The variants are tried in the route's order; the first one that is not overloaded answers,
and when all are, the last (fastest) one does. A variant is overloaded when, per the route's
``degrade`` section, its queue holds ``max_queue`` requests or more, its p99 latency over
the last ``window_s`` seconds (measured on the requests this route sent it, with at least
``min_samples`` of them) is above ``p99_ms`` (or the request's own ``latency_target_ms``), or
its circuit breaker is open. Without recent
samples the p99 does not count, so traffic returns to the primary after a slow spell and
measures it again. A request with the parameter ``allow_degraded: false`` always goes to
the first variant.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from inferplex.routing.config import DegradeConfig

#: how often a variant's p99 is recomputed at most (seconds)
_P99_REFRESH_S = 0.05
#: samples kept per variant (the window is also cut by time)
_MAX_SAMPLES = 4096


class LatencyWindow:
    """Latencies of the last ``window_s`` seconds and their p99, recomputed at most every
    ``_P99_REFRESH_S``."""

    def __init__(self, window_s: float, min_samples: int) -> None:
        self._window = window_s
        self._min_samples = min_samples
        self._samples: deque[tuple[float, float]] = deque(maxlen=_MAX_SAMPLES)
        self._p99: float | None = None
        self._computed_at = -float("inf")

    def record(self, now: float, latency_s: float) -> None:
        self._samples.append((now, latency_s))

    def p99_ms(self, now: float) -> float | None:
        """p99 in milliseconds, or None with fewer than ``min_samples`` recent samples."""
        if now - self._computed_at < _P99_REFRESH_S:
            return self._p99
        samples = self._samples
        cutoff = now - self._window
        while samples and samples[0][0] < cutoff:
            samples.popleft()
        self._computed_at = now
        if len(samples) < self._min_samples:
            self._p99 = None
        else:
            values = np.fromiter((s[1] for s in samples), dtype=np.float64, count=len(samples))
            self._p99 = float(np.percentile(values, 99)) * 1e3
        return self._p99


@dataclass(frozen=True, slots=True)
class VariantLoad:
    """What the policy knows about a variant right now."""

    queued: int | None
    """requests in its queue; None when it cannot serve (unknown, not ready)"""
    breaker_open: bool


class DegradePolicy:
    def __init__(self, config: DegradeConfig, variants: int, clock: Callable[[], float]) -> None:
        self.config = config
        self.windows = [LatencyWindow(config.window_s, config.min_samples) for _ in range(variants)]
        self._clock = clock

    def choose(
        self, load: Callable[[int], VariantLoad], p99_ms: float | None = None
    ) -> tuple[int, str]:
        """(index of the variant to use, why the ones before it were passed over).
        ``p99_ms`` replaces the configured latency target (a request's own)."""
        last = len(self.windows) - 1
        reasons: list[str] = []
        for index in range(last):
            reason = self.overloaded(index, load(index), p99_ms)
            if reason is None:
                return index, "; ".join(reasons)
            reasons.append(reason)
        return last, "; ".join(reasons)

    def overloaded(self, index: int, load: VariantLoad, p99_ms: float | None = None) -> str | None:
        """Why variant ``index`` should not answer now, or None."""
        config = self.config
        target = config.p99_ms if p99_ms is None else p99_ms
        if load.queued is None:
            return "not ready"
        if config.when_breaker_open and load.breaker_open:
            return "circuit breaker open"
        if config.max_queue and load.queued >= config.max_queue:
            return f"queue {load.queued} >= {config.max_queue}"
        if target:
            p99 = self.windows[index].p99_ms(self._clock())
            if p99 is not None and p99 > target:
                return f"p99 {p99:.1f} ms > {target:g} ms"
        return None

    def record(self, index: int, latency_s: float) -> None:
        self.windows[index].record(self._clock(), latency_s)
