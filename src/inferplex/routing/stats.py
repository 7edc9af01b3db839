"""Per-route statistics: requests and latencies per target, and the shadow's record.

Recording is an append to a bounded deque (the event loop records; nothing is computed per
request); percentiles are computed when the statistics are read.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

#: latencies kept per series for the percentiles
WINDOW = 2048


def summary_ms(latencies_s: deque[float] | list[float]) -> dict[str, float]:
    """mean / p50 / p90 / p99 / max in milliseconds of the latencies kept (empty: {})."""
    if not latencies_s:
        return {}
    values = np.fromiter(latencies_s, dtype=np.float64) * 1e3
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {
        "mean": round(float(values.mean()), 4),
        "p50": round(float(p50), 4),
        "p90": round(float(p90), 4),
        "p99": round(float(p99), 4),
        "max": round(float(values.max()), 4),
    }


class TargetStats:
    """Requests a route sent to one of its targets."""

    __slots__ = ("failures", "latencies", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.failures = 0
        self.latencies: deque[float] = deque(maxlen=WINDOW)

    def record(self, ok: bool, latency_s: float) -> None:
        self.requests += 1
        if ok:
            self.latencies.append(latency_s)
        else:
            self.failures += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "latency_ms": summary_ms(self.latencies),
        }


class ShadowStats:
    """What the shadow did: its latency next to the primary's, and how far its outputs were
    from the primary's (max absolute difference and cosine similarity per request, over the
    outputs both returned)."""

    def __init__(self) -> None:
        self.mirrored = 0
        self.skipped = 0  # too many shadow requests in flight, or not sampled
        self.errors = 0
        self.last_error = ""
        self.compared = 0
        self.incomparable = 0  # outputs missing, or of another shape or datatype
        self.latencies: deque[float] = deque(maxlen=WINDOW)
        self.primary_latencies: deque[float] = deque(maxlen=WINDOW)
        self.max_abs_diff = 0.0
        self._sum_abs_diff = 0.0
        self.min_cosine = math.inf
        self._sum_cosine = 0.0

    def record_error(self, message: str) -> None:
        self.errors += 1
        self.last_error = message

    def record_latency(self, shadow_s: float, primary_s: float) -> None:
        self.latencies.append(shadow_s)
        self.primary_latencies.append(primary_s)

    def record_diff(self, max_abs_diff: float | None, cosine: float | None) -> None:
        """One request compared; None when its outputs could not be compared."""
        if max_abs_diff is None or cosine is None:
            self.incomparable += 1
            return
        self.compared += 1
        self.max_abs_diff = max(self.max_abs_diff, max_abs_diff)
        self._sum_abs_diff += max_abs_diff
        self.min_cosine = min(self.min_cosine, cosine)
        self._sum_cosine += cosine

    def to_dict(self) -> dict[str, Any]:
        compared = self.compared
        shadow = summary_ms(self.latencies)
        primary = summary_ms(self.primary_latencies)
        out: dict[str, Any] = {
            "mirrored": self.mirrored,
            "skipped": self.skipped,
            "errors": self.errors,
            "last_error": self.last_error,
            "latency_ms": shadow,
            "primary_latency_ms": primary,
            "compared": compared,
            "incomparable": self.incomparable,
            "max_abs_diff": {
                "max": self.max_abs_diff if compared else None,
                "mean": self._sum_abs_diff / compared if compared else None,
            },
            "cosine": {
                "min": self.min_cosine if compared else None,
                "mean": self._sum_cosine / compared if compared else None,
            },
        }
        if shadow and primary and primary["p50"] > 0:
            out["p50_latency_ratio"] = round(shadow["p50"] / primary["p50"], 4)
        return out
