"""What an LLM engine (backends/llm) reports to the metrics port and the dashboard
(docs/llm.md, *Metrics*): its sequences, KV blocks, prefix-cache lookups, preemptions,
tokens, and the latency of its tokens (time to first token, inter-token latency) as
histograms. Beside ``base`` (its ``Backend.engine_stats`` hook), not inside the llm package.

The engine thread writes the counters and histograms; a scrape reads them on the event loop
through ``Engine.stats()`` (a copy: plain ints and lists, so a read racing a step sees one
step's values or the next's, never a torn structure). Nothing here imports torch.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

#: upper bounds (seconds) of the time-to-first-token and inter-token-latency buckets: from
#: a fast decode step (1 ms) to a long queued prefill (20 s)
TOKEN_LATENCY_BOUNDS_S: tuple[float, ...] = (
    *(0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1),
    *(0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0),
)


@dataclass(frozen=True, slots=True)
class HistogramCounts:
    """One histogram read: counts per bucket (the last one +Inf) and the sum, in seconds."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)


class TokenLatency:
    """A histogram of latencies in seconds, observed by the engine thread alone."""

    __slots__ = ("_counts", "_sum", "bounds")

    def __init__(self, bounds: tuple[float, ...] = TOKEN_LATENCY_BOUNDS_S) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self.bounds, seconds)] += 1
        self._sum += seconds

    def read(self) -> HistogramCounts:
        return HistogramCounts(self.bounds, tuple(self._counts), self._sum)


@dataclass(frozen=True, slots=True)
class EngineStats:
    """An engine's state now and its totals since it started."""

    #: sequences in the running batch (decoding or part-way through their prefill)
    running: int
    #: sequences waiting to be admitted (new, or preempted to recompute)
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    #: prefix-cache lookups: full prompt blocks looked for and blocks found cached
    prefix_queried_blocks: int
    prefix_hit_blocks: int
    #: running sequences preempted (their blocks freed, to recompute later)
    preemptions: int
    #: engine steps run (forward passes)
    steps: int
    #: prompt tokens computed (recomputation after a preemption included; prefix-cache hits not)
    prompt_tokens: int
    generated_tokens: int
    #: requests that ended (any reason) and those whose client went away
    finished: int
    cancelled: int
    #: from the request reaching the engine to its first token; between a request's tokens
    time_to_first_token: HistogramCounts
    inter_token_latency: HistogramCounts

    @property
    def prefix_hit_rate(self) -> float | None:
        """Blocks found / blocks looked for; None before any lookup."""
        if not self.prefix_queried_blocks:
            return None
        return self.prefix_hit_blocks / self.prefix_queried_blocks
