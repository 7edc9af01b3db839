"""Per-model-version statistics in the shape of Triton's statistics extension.

Updated only on the event loop thread (the worker hands its timings back with the result), so
no locks are needed. Batch figures are recorded once per batch, request figures once per
request: both are a handful of integer additions.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Activity:
    """A count that moves whenever a request is answered or the served models change: an
    observer that finds it where it was knows that nothing it shows has changed (the sampler
    then skips the walk over every model, so a thousand idle models cost nothing)."""

    count = 0


ACTIVITY = Activity()

#: Upper bounds (ns) of the latency histograms: 100 µs to 10 s, roughly 1-2.5-5 per decade.
LATENCY_BOUNDS_NS: tuple[int, ...] = tuple(
    int(ms * 1_000_000)
    for ms in (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
)


class Histogram:
    """Counts per fixed bucket (the last one is +Inf) and the sum of the observed values.

    One bisect and two integer additions per observation; no locks, since like every
    statistic here it is updated only on the event loop thread. Counts are per bucket, not
    cumulative: the exposition sums them at scrape time.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[int, ...] = LATENCY_BOUNDS_NS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0

    def observe(self, value: int) -> None:
        # bisect_left puts a value equal to a bound in that bound's bucket (Prometheus' le)
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class _BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


_PHASES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


class ModelStats:
    """Counters of one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        #: requests whose callers went away before the answer (a closed connection, a reset
        #: stream, a deadline); counted as failures too, as Triton does
        self.cancelled = 0
        self.phases = {phase: Duration() for phase in _PHASES}
        self.batches: dict[int, _BatchStats] = {}
        #: latency distributions: per successful request, per queued request, per execution
        self.request_hist = Histogram()
        self.queue_hist = Histogram()
        self.compute_hists = (Histogram(), Histogram(), Histogram())
        # the phases every request or batch touches, without a dict lookup each time
        phases = self.phases
        self._success, self._fail, self._queue = phases["success"], phases["fail"], phases["queue"]
        self._compute = (phases["compute_input"], phases["compute_infer"], phases["compute_output"])

    def record_batch(
        self,
        rows: int,
        began_ns: int,
        enqueued_ns: list[int],
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
    ) -> None:
        """One backend execution of ``rows`` rows, begun at ``began_ns``, answering requests
        queued at ``enqueued_ns``; like Triton, each request is charged its own queue time and
        the batch's compute times."""
        self.inference_count += rows
        self.execution_count += 1
        requests = len(enqueued_ns)
        queue_hist = self.queue_hist
        queue_ns = 0
        for enqueued in enqueued_ns:
            wait = began_ns - enqueued
            queue_ns += wait
            queue_hist.observe(wait)
        self._queue.add(queue_ns, requests)
        input_hist, infer_hist, output_hist = self.compute_hists
        input_hist.observe(compute_input_ns)
        infer_hist.observe(compute_infer_ns)
        output_hist.observe(compute_output_ns)
        compute_input, compute_infer, compute_output = self._compute
        compute_input.add(compute_input_ns * requests, requests)
        compute_infer.add(compute_infer_ns * requests, requests)
        compute_output.add(compute_output_ns * requests, requests)
        batch = self.batches.get(rows)
        if batch is None:
            batch = self.batches[rows] = _BatchStats()
        batch.compute_input.add(compute_input_ns)
        batch.compute_infer.add(compute_infer_ns)
        batch.compute_output.add(compute_output_ns)

    def record_cache(self, hit: bool, lookup_ns: int) -> None:
        self.phases["cache_hit" if hit else "cache_miss"].add(lookup_ns)

    def record_request(self, ok: bool, duration_ns: int) -> None:
        if ok:
            phase = self._success
            self.request_hist.observe(duration_ns)
        else:
            phase = self._fail
        phase.count += 1
        phase.ns += duration_ns
        self.last_inference_ms = time.time_ns() // 1_000_000
        ACTIVITY.count += 1

    def statistics(self, close_reasons: Mapping[Any, int]) -> dict[str, Any]:
        """Triton's statistics of the version, plus why its batches closed (the queue's
        ``close_reasons``) and how many requests were cancelled (their callers went away)."""
        stats = self.to_dict()
        stats["batch_close_reasons"] = {str(k): n for k, n in close_reasons.items()}
        stats["cancelled_count"] = self.cancelled
        return stats

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {phase: d.to_dict() for phase, d in self.phases.items()},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_dict(),
                    "compute_infer": b.compute_infer.to_dict(),
                    "compute_output": b.compute_output.to_dict(),
                }
                for size, b in sorted(self.batches.items())
            ],
        }
