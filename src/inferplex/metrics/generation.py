"""The generation families of the OpenAI-compatible API (docs/observability.md,
docs/openai.md): time to first token and inter-token latency histograms, prompt and
completion token counters and requests, per model, read from the codec's table
(``protocol/openai/stats.py``) at each scrape; and the same figures for the dashboard."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from inferplex.core.stats import Histogram
from inferplex.metrics.exposition import Family, HistogramValue
from inferplex.protocol.openai.stats import GenerationStats


@lru_cache(maxsize=4)
def _seconds(bounds_ns: tuple[int, ...]) -> tuple[float, ...]:
    return tuple(b / 1e9 for b in bounds_ns)


def _histogram(buckets: Histogram) -> HistogramValue:
    return HistogramValue(_seconds(buckets.bounds), list(buckets.counts), buckets.sum / 1e9)


def quantile_ms(buckets: Histogram, q: float) -> float | None:
    """The upper bound (ms) of the bucket holding the ``q`` quantile; None if empty (the
    +Inf bucket reports the last bound)."""
    total = sum(buckets.counts)
    if not total:
        return None
    seen = 0
    for bound, count in zip(buckets.bounds, buckets.counts, strict=False):
        seen += count
        if seen >= q * total:
            return bound / 1e6
    return buckets.bounds[-1] / 1e6


def generation_families(stats: GenerationStats) -> list[Family]:
    ttft = Family(
        "inferplex_time_to_first_token_seconds",
        "histogram",
        "Time from an OpenAI chat or completion request's arrival to its first token",
    )
    itl = Family(
        "inferplex_inter_token_latency_seconds",
        "histogram",
        "Time between two tokens of one choice of an OpenAI chat or completion",
    )
    prompt = Family(
        "inferplex_prompt_tokens", "counter", "Prompt tokens of OpenAI chat and completion requests"
    )
    completion = Family(
        "inferplex_completion_tokens", "counter", "Tokens generated for OpenAI requests"
    )
    requests = Family(
        "inferplex_generation_requests", "counter", "OpenAI chat and completion requests answered"
    )
    for model, figures in stats.models.items():
        labels = {"model": model}
        ttft.add_histogram(labels, _histogram(figures.ttft))
        itl.add_histogram(labels, _histogram(figures.itl))
        prompt.add(labels, figures.prompt_tokens)
        completion.add(labels, figures.completion_tokens)
        requests.add(labels, figures.requests)
    return [ttft, itl, prompt, completion, requests]


def generation_data(stats: GenerationStats) -> list[dict[str, Any]]:
    """Per model, for the dashboard: TTFT and ITL p50 / p99 (ms, the bucket bounds) and the
    token counts."""
    return [
        {
            "model": model,
            "requests": figures.requests,
            "prompt_tokens": figures.prompt_tokens,
            "completion_tokens": figures.completion_tokens,
            "ttft_p50_ms": quantile_ms(figures.ttft, 0.5),
            "ttft_p99_ms": quantile_ms(figures.ttft, 0.99),
            "itl_p50_ms": quantile_ms(figures.itl, 0.5),
            "itl_p99_ms": quantile_ms(figures.itl, 0.99),
        }
        for model, figures in sorted(stats.models.items())
    ]
