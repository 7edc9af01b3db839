"""Per-model figures of generation, kept as the OpenAI codec streams tokens and read by the
metrics port at each scrape (``metrics/generation.py`` declares the families): time to first
token, inter-token latency, prompt and completion tokens, requests.

One table per server process (``GENERATION``), as the custom model metrics are: updated only
on the event loop thread (a few integer additions per token), so no locks."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

#: upper bounds (ns) of the time-to-first-token histogram: 1 ms to 60 s
TTFT_BOUNDS_NS: tuple[int, ...] = tuple(
    int(ms * 1_000_000)
    for ms in (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
)
#: upper bounds (ns) of the inter-token latency histogram: 0.1 ms to 5 s
ITL_BOUNDS_NS: tuple[int, ...] = tuple(
    int(ms * 1_000_000)
    for ms in (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
)


class Buckets:
    """Counts per fixed bucket (the last one +Inf) and the sum of the values (ns)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[int, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0

    def observe(self, value: int) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def quantile(self, q: float) -> float | None:
        """The upper bound (ms) of the bucket holding the ``q`` quantile; None if empty."""
        total = sum(self.counts)
        if not total:
            return None
        seen = 0
        for bound, count in zip((*self.bounds, self.bounds[-1]), self.counts, strict=True):
            seen += count
            if seen >= q * total:
                return bound / 1e6
        return self.bounds[-1] / 1e6


@dataclass(slots=True)
class ModelGeneration:
    """The figures of one model."""

    ttft: Buckets = field(default_factory=lambda: Buckets(TTFT_BOUNDS_NS))
    itl: Buckets = field(default_factory=lambda: Buckets(ITL_BOUNDS_NS))
    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0


class GenerationStats:
    """Every model's figures, by model name (the name the client asked for: a route's)."""

    def __init__(self) -> None:
        self.models: dict[str, ModelGeneration] = {}

    def of(self, model: str) -> ModelGeneration:
        found = self.models.get(model)
        if found is None:
            found = self.models[model] = ModelGeneration()
        return found


GENERATION = GenerationStats()
