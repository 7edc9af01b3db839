"""Per-model figures of generation, kept as the OpenAI codec streams tokens and read by the
metrics port at each scrape (``metrics/generation.py`` declares the families): time to first
token, inter-token latency, prompt and completion tokens, requests.

One table per server process (``GENERATION``), as the custom model metrics are: updated only
on the event loop thread (a few integer additions per token), so no locks."""

from __future__ import annotations

from dataclasses import dataclass, field

from inferplex.core.stats import Histogram

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


@dataclass(slots=True)
class ModelGeneration:
    """The figures of one model."""

    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BOUNDS_NS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BOUNDS_NS))
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
