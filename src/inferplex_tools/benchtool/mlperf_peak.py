"""``--find-peak``: the highest Server QPS that LoadGen reports VALID, found with short runs.

Pure search, no I/O: it is given ``probe(qps) -> valid`` (a LoadGen Server run at that QPS)
and decides where to probe next.

1. **Bracket.** From the starting QPS, double while VALID (the last VALID is the lower end,
   the first INVALID the upper), or halve while INVALID (the first VALID is the lower end),
   down to the starting QPS / ``MAX_HALVING``: a run lasts at least its minimum query count
   divided by the QPS, so each halving doubles a probe's time, and a server INVALID at a
   small fraction of the expected load is missing the bound for another reason than load
   (or the probes are too short for LoadGen's early stopping).
2. **Bisect** between the ends until they are within ``tolerance`` of the lower end
   (0.05 = 5%), each probe replacing the end it agrees with.

A probe costs a full LoadGen run (its minimum duration and query count), so ``max_probes``
bounds the whole search; the answer is the highest VALID QPS seen, or None when no probe was
VALID.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

#: the lowest QPS probed is the starting QPS divided by this
MAX_HALVING = 16


@dataclass(frozen=True)
class Probe:
    """One LoadGen run of the search."""

    qps: float
    valid: bool


@dataclass
class PeakSearch:
    """The probes made, in order, and the highest VALID QPS among them."""

    probes: list[Probe] = field(default_factory=list)

    @property
    def peak(self) -> float | None:
        valid = [p.qps for p in self.probes if p.valid]
        return max(valid) if valid else None


def find_peak(
    probe: Callable[[float], bool],
    start_qps: float,
    *,
    tolerance: float = 0.05,
    max_probes: int = 12,
) -> PeakSearch:
    """Search the highest QPS for which ``probe`` returns True (see the module's docstring)."""
    if start_qps <= 0 or tolerance <= 0 or max_probes < 1:
        raise ValueError("start_qps and tolerance must be > 0 and max_probes >= 1")
    search = PeakSearch()

    def run(qps: float) -> bool:
        valid = probe(qps)
        search.probes.append(Probe(qps, valid))
        return valid

    low: float | None = None  # highest VALID QPS
    high: float | None = None  # lowest INVALID QPS
    qps = start_qps
    while len(search.probes) < max_probes and (low is None or high is None):
        if run(qps):
            low = qps
            qps *= 2
        else:
            high = qps
            qps /= 2
            if qps < start_qps / MAX_HALVING:
                return search
    while (
        low is not None
        and high is not None
        and len(search.probes) < max_probes
        and high - low > tolerance * low
    ):
        middle = (low + high) / 2
        if run(middle):
            low = middle
        else:
            high = middle
    return search
