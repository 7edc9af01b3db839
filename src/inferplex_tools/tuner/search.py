"""Successive halving over the candidates.

Why successive halving rather than a Bayesian optimiser: the space is small, discrete and
categorical (a handful of values per parameter), the figures are noisy on a shared machine,
and a measurement's precision is bought with time. Successive halving spends that time
where it matters: every candidate gets a short measurement (rung 0); the best ``1/eta`` of
them (by :func:`~inferplex_tools.tuner.pareto.score`) are measured again ``eta`` times longer,
and so on until one is left, which is measured once more at the longest window (its figures
are the ones reported), or the rungs run out. With ``n`` candidates it costs about
``n * (1 + rungs/eta)`` short measurements instead of ``n`` long ones, and a lucky short
measurement is re-checked before it wins. A Gaussian-process model would need more points
than such a space has to beat a simple elimination, and an extra dependency.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from inferplex_tools.tuner.pareto import Point, score
from inferplex_tools.tuner.space import Candidate

#: measure(candidates, rung) -> one point per candidate that could be measured
Measure = Callable[[Sequence[Candidate], int], Awaitable[dict[Candidate, Point]]]


@dataclass
class Rung:
    """What one round measured and kept."""

    index: int
    measured: dict[Candidate, Point]
    kept: list[Candidate]


def rung_count(candidates: int, eta: int) -> int:
    """Rungs until one candidate is left and measured: ceil(log_eta(n)) + 1."""
    if candidates <= 1:
        return 1
    return math.ceil(math.log(candidates, eta) - 1e-9) + 1


async def successive_halving(
    candidates: Sequence[Candidate],
    measure: Measure,
    eta: int = 3,
    target_ms: float | None = None,
    max_rungs: int = 0,
) -> list[Rung]:
    """Run the rungs; the last rung's ``kept`` holds the winner first."""
    if eta < 2:
        raise ValueError(f"eta must be >= 2, got {eta}")
    rungs: list[Rung] = []
    alive = list(candidates)
    total = rung_count(len(alive), eta)
    if max_rungs > 0:
        total = min(total, max_rungs)
    for index in range(total):
        measured = await measure(alive, index)
        ranked = sorted(measured, key=lambda c: score(measured[c], target_ms), reverse=True)
        last = index == total - 1 or len(ranked) <= 1
        keep = len(ranked) if last else max(1, math.ceil(len(ranked) / eta))
        rungs.append(Rung(index, measured, ranked[:keep]))
        alive = ranked[:keep]
        if last:
            break
    return rungs
