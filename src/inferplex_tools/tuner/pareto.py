"""The throughput-vs-p99 Pareto frontier, and the best configuration under a latency target."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Point:
    """One measured candidate."""

    key: str
    throughput: float
    p99_ms: float
    data: Any = None


def frontier(points: Iterable[Point]) -> list[Point]:
    """Points no other point beats on both figures (higher throughput *and* lower or equal
    p99, or equal throughput and lower p99), by ascending p99."""
    ordered = sorted(points, key=lambda p: (p.p99_ms, -p.throughput))
    front: list[Point] = []
    best = float("-inf")
    for point in ordered:
        if point.throughput > best:
            front.append(point)
            best = point.throughput
    return front


def best_under(points: Sequence[Point], target_ms: float | None) -> Point | None:
    """Highest throughput with p99 within ``target_ms`` (any p99 when None); None if none."""
    eligible = [p for p in points if target_ms is None or p.p99_ms <= target_ms]
    return max(eligible, key=lambda p: (p.throughput, -p.p99_ms), default=None)


def score(point: Point, target_ms: float | None) -> tuple[int, float]:
    """Sort key, higher is better: candidates meeting the target by throughput, then the rest
    by how low their p99 is."""
    if target_ms is None or point.p99_ms <= target_ms:
        return (1, point.throughput)
    return (0, -point.p99_ms)
