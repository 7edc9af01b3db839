"""The search space: every combination of the values given per parameter.

Combinations that cannot differ are dropped before the search: a queue delay only matters
when requests can be batched (``max_batch_size`` above 1), so a candidate without batching
keeps the smallest delay only.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from inferplex_tools.benchtool import BenchError

PRECISIONS = ("fp32", "int8")


@dataclass(frozen=True, order=True)
class Candidate:
    """One configuration to try."""

    max_batch_size: int
    queue_delay_us: int
    instances: int
    threads: int
    precision: str = "fp32"

    @property
    def key(self) -> str:
        """A name usable as a model folder suffix, e.g. ``b8_d100_i1_t2_fp32``."""
        return (
            f"b{self.max_batch_size}_d{self.queue_delay_us}_i{self.instances}_"
            f"t{self.threads}_{self.precision}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SearchSpace:
    """Values to try per parameter (the model's own value when a list is empty)."""

    max_batch_size: list[int] = field(default_factory=list)
    queue_delay_us: list[int] = field(default_factory=lambda: [0])
    instances: list[int] = field(default_factory=lambda: [1])
    threads: list[int] = field(default_factory=lambda: [1])
    precision: list[str] = field(default_factory=lambda: ["fp32"])

    def check(self, model_batches: bool) -> None:
        """BenchError naming the parameter with a value that cannot work for this model."""
        if model_batches and any(b < 1 for b in self.max_batch_size):
            raise BenchError(
                "--max-batch-size: this model batches (its dims leave out the batch dimension); "
                "values must be >= 1"
            )
        if not model_batches and any(b != 0 for b in self.max_batch_size):
            raise BenchError(
                "--max-batch-size: this model has max_batch_size 0 (no batch dimension); it "
                "cannot be searched"
            )
        for name, values, low in (
            ("--queue-delay-us", self.queue_delay_us, 0),
            ("--instances", self.instances, 1),
            ("--threads", self.threads, 1),
        ):
            if not values or any(v < low for v in values):
                raise BenchError(f"{name}: expected integers >= {low}, got {values}")
        bad = [p for p in self.precision if p not in PRECISIONS]
        if bad or not self.precision:
            raise BenchError(f"--precision: expected some of {', '.join(PRECISIONS)}, got {bad}")

    def candidates(self, default_batch: int) -> list[Candidate]:
        """The distinct combinations, sorted."""
        batches = self.max_batch_size or [default_batch]
        found: set[Candidate] = set()
        for batch, delay, instances, threads, precision in itertools.product(
            batches, self.queue_delay_us, self.instances, self.threads, self.precision
        ):
            found.add(self.settle(Candidate(batch, delay, instances, threads, precision)))
        return sorted(found)

    def settle(self, candidate: Candidate) -> Candidate:
        """``candidate`` as the grid holds it: without batching, the smallest queue delay
        (any other cannot make a difference)."""
        if candidate.max_batch_size <= 1:
            return replace(candidate, queue_delay_us=min(self.queue_delay_us))
        return candidate


def sample(candidates: list[Candidate], limit: int, seed: int = 0) -> list[Candidate]:
    """At most ``limit`` candidates, drawn at random (reproducibly) when there are more."""
    if limit <= 0 or len(candidates) <= limit:
        return list(candidates)
    return sorted(random.Random(seed).sample(candidates, limit))
