"""Latency percentiles and the stability rule that ends a measurement.

A level is measured in consecutive windows of equal length. It is *stable* when the last
``count`` windows agree: each one's throughput and p50 latency lie within ``tolerance``
(a fraction, 0.1 = ±10%) of their mean over those windows. That is perf_analyzer's rule
(there with the average latency); p50 is used here because on a shared machine one stalled
request moves the average of a short window more than it moves the median.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: percentiles every result reports
PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class LatencySummary:
    """Figures of a set of latencies measured over ``seconds``; latencies in milliseconds."""

    requests: int
    seconds: float
    throughput: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 4),
            "throughput": round(self.throughput, 2),
            "mean_ms": round(self.mean_ms, 4),
            "min_ms": round(self.min_ms, 4),
            "max_ms": round(self.max_ms, 4),
            "p50_ms": round(self.p50_ms, 4),
            "p90_ms": round(self.p90_ms, 4),
            "p95_ms": round(self.p95_ms, 4),
            "p99_ms": round(self.p99_ms, 4),
        }


def summarize(latencies_ns: Sequence[int], seconds: float) -> LatencySummary:
    """Throughput (requests per second) and latency figures; NaN latencies when empty."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    count = len(latencies_ns)
    if not count:
        nan = float("nan")
        return LatencySummary(0, seconds, 0.0, nan, nan, nan, nan, nan, nan, nan)
    ms = np.asarray(latencies_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99 = (float(v) for v in np.percentile(ms, PERCENTILES))
    return LatencySummary(
        requests=count,
        seconds=seconds,
        throughput=count / seconds,
        mean_ms=float(ms.mean()),
        min_ms=float(ms.min()),
        max_ms=float(ms.max()),
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
    )


@dataclass(frozen=True)
class Window:
    """One measurement window of one load stream."""

    latencies_ns: list[int]
    seconds: float

    @property
    def throughput(self) -> float:
        return len(self.latencies_ns) / self.seconds

    @property
    def p50_ms(self) -> float:
        if not self.latencies_ns:
            return float("nan")
        return float(np.median(self.latencies_ns)) / 1e6


def is_stable(windows: Sequence[Window], tolerance: float, count: int = 3) -> bool:
    """Whether the last ``count`` windows agree within ``tolerance`` (see the module doc)."""
    if tolerance <= 0:
        raise ValueError(f"stability tolerance must be > 0 (0.1 = ±10%), got {tolerance}")
    if count < 1 or len(windows) < count:
        return False
    last = windows[-count:]
    if any(not w.latencies_ns for w in last):
        return False
    return _within([w.throughput for w in last], tolerance) and _within(
        [w.p50_ms for w in last], tolerance
    )


def _within(values: Sequence[float], tolerance: float) -> bool:
    mean = sum(values) / len(values)
    return all(abs(v - mean) <= tolerance * mean for v in values)


def merge(windows: Sequence[Window]) -> LatencySummary:
    """One summary over several windows (their latencies together, their seconds added)."""
    latencies = [ns for w in windows for ns in w.latencies_ns]
    return summarize(latencies, sum(w.seconds for w in windows))
