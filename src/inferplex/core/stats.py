"""Per-model-version statistics in the shape of Triton's statistics extension.

Updated only on the event loop thread (the worker hands its timings back with the result), so
no locks are needed. Batch figures are recorded once per batch, request figures once per
request: both are a handful of integer additions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


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
        self.phases = {phase: Duration() for phase in _PHASES}
        self.batches: dict[int, _BatchStats] = {}
        # the phases every request or batch touches, without a dict lookup each time
        phases = self.phases
        self._success, self._fail, self._queue = phases["success"], phases["fail"], phases["queue"]
        self._compute = (phases["compute_input"], phases["compute_infer"], phases["compute_output"])

    def record_batch(
        self,
        rows: int,
        requests: int,
        queue_ns: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
    ) -> None:
        """One backend execution of ``rows`` rows answering ``requests`` requests that waited
        ``queue_ns`` in all; like Triton, each request is charged its own queue time and the
        batch's compute times."""
        self.inference_count += rows
        self.execution_count += 1
        self._queue.add(queue_ns, requests)
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
        phase = self._success if ok else self._fail
        phase.count += 1
        phase.ns += duration_ns
        self.last_inference_ms = time.time_ns() // 1_000_000

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
