"""The sampler: once a second, on the event loop, reads the engine's counters and keeps what
changed over the last window — throughput, latency percentiles, queue sizes, busy ratios,
memory, the server's CPU — as a short history for the live dashboard and as the window
gauges of ``/metrics`` (CPU utilisation, instance busy ratio).

It only reads counters the data path keeps anyway, so it adds nothing per request; one
tick costs a few microseconds per served model version — and next to nothing when the
engine's activity count says nothing was answered or loaded since the last tick and nothing
waits or runs: the versions' points are then those of a quiet window, made once, so a
server of a thousand idle models is not woken to walk them every second.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from inferplex.core.snapshot import EngineSnapshot, ModelSnapshot, VersionSnapshot
from inferplex.core.stats import LATENCY_BOUNDS_NS, ModelStats
from inferplex.lifecycle.memory import rss_bytes
from inferplex.metrics.process import (
    process_cpu_seconds,
    process_rss_bytes,
    system_cpu_times,
)

#: (model name, version) of a served model version
VersionId = tuple[str, str]
#: what reads the engine's models now (``InferenceEngine.snapshot``)
Snapshot = Callable[[], EngineSnapshot]
#: a count that moves whenever the snapshot may differ; None: it may differ now
#: (``InferenceEngine.activity``)
Activity = Callable[[], int | None]


def busy_ns(stats: ModelStats) -> int:
    """Nanoseconds the version's instances spent running batches (all compute phases)."""
    return sum(
        b.compute_input.ns + b.compute_infer.ns + b.compute_output.ns
        for b in stats.batches.values()
    )


def histogram_quantile(
    q: float, counts: list[int], bounds: tuple[int, ...] = LATENCY_BOUNDS_NS
) -> float | None:
    """The q-quantile of per-bucket counts, interpolated inside its bucket as Prometheus'
    ``histogram_quantile`` does; None without observations. Same unit as ``bounds``."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index == len(bounds):  # the +Inf bucket: the highest finite bound
                return float(bounds[-1])
            lower = bounds[index - 1] if index else 0
            return lower + (bounds[index] - lower) * (rank - seen) / count
        seen += count
    return float(bounds[-1])


@dataclass(slots=True)
class _Totals:
    """A version's cumulative counters at one tick."""

    requests: int
    failures: int
    latency_counts: list[int]
    busy_ns: int


@dataclass(slots=True)
class VersionPoint:
    """One version over one window."""

    state: str
    throughput: float  # successful requests per second
    errors: float  # failed requests per second
    p50_ms: float | None
    p99_ms: float | None
    queue: int  # requests waiting at the end of the window
    busy: float  # share of the window its instances ran batches, 0..1
    memory: int | None  # bytes, where measured


@dataclass(slots=True)
class ServerPoint:
    cpu: float | None  # this process, share of all cores, 0..1
    system_cpu: float | None  # the whole machine, 0..1
    rss: int | None  # this process
    #: this process and its worker processes (Python models, isolated models): the figure
    #: --process-memory-limit and /v2/repository/memory count
    tree_rss: int
    inflight: int


@dataclass(slots=True)
class Sample:
    time: float  # seconds since the epoch
    server: ServerPoint
    versions: dict[VersionId, VersionPoint]


class Sampler:
    """Keeps the last ``keep`` one-window samples of the engine."""

    def __init__(
        self,
        snapshot: Snapshot,
        interval: float = 1.0,
        keep: int = 300,
        activity: Activity | None = None,
    ) -> None:
        self.snapshot = snapshot
        self._activity = activity
        self._seen: int | None = None  # the activity count at the previous sample
        self._quiet: dict[VersionId, VersionPoint] | None = None  # the versions, idle
        self.interval = interval
        self.history: deque[Sample] = deque(maxlen=keep)
        # by (model, version): a reloaded version keeps its statistics object and counters
        self._totals: dict[VersionId, _Totals] = {}
        self._cores = os.cpu_count() or 1
        self._last = time.monotonic()
        self._cpu = process_cpu_seconds()
        self._system = system_cpu_times()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- running on the loop ------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handle = loop.call_later(self.interval, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        self.sample()
        assert self._loop is not None
        self._handle = self._loop.call_later(self.interval, self._tick)

    # -- one sample -----------------------------------------------------------------------------
    def sample(self) -> Sample:
        """Read every counter now; the window is the time since the previous sample."""
        now = time.monotonic()
        window = max(now - self._last, 1e-9)
        self._last = now
        cpu = process_cpu_seconds()
        cpu_share = (cpu - self._cpu) / (window * self._cores)
        self._cpu = cpu
        system_share = None
        system = system_cpu_times()
        if system is not None and self._system is not None:
            busy, total = system[0] - self._system[0], system[1] - self._system[1]
            system_share = busy / total if total > 0 else 0.0
        self._system = system
        seen, self._seen = self._seen, None if self._activity is None else self._activity()
        if seen is not None and seen == self._seen and self.history:
            versions, inflight = self._idle_points(), 0  # (every counter is where it was)
        else:
            self._quiet = None
            versions, inflight = self._points(window)
        server = ServerPoint(
            min(max(cpu_share, 0.0), 1.0), system_share, process_rss_bytes(), rss_bytes(), inflight
        )
        sample = Sample(time.time(), server, versions)
        self.history.append(sample)
        return sample

    def _idle_points(self) -> dict[VersionId, VersionPoint]:
        """The versions over a window in which nothing happened: the last sample's, idle."""
        if self._quiet is None:
            self._quiet = {
                key: replace(
                    point, throughput=0.0, errors=0.0, p50_ms=None, p99_ms=None, queue=0, busy=0.0
                )
                for key, point in self.history[-1].versions.items()
            }
        return self._quiet

    def _points(self, window: float) -> tuple[dict[VersionId, VersionPoint], int]:
        """Every served version over the window, and the requests in flight now."""
        versions: dict[VersionId, VersionPoint] = {}
        totals: dict[VersionId, _Totals] = {}
        inflight = 0
        for model, version in self.snapshot().served():
            inflight += version.in_flight
            stats = version.stats
            current = _Totals(
                stats.phases["success"].count,
                stats.phases["fail"].count,
                list(stats.request_hist.counts),
                busy_ns(stats),
            )
            key = (model.name, version.version)
            totals[key] = current
            versions[key] = _point(model, version, current, self._totals.get(key), window)
        self._totals = totals
        return versions, inflight

    @property
    def latest(self) -> Sample | None:
        return self.history[-1] if self.history else None


def _point(
    model: ModelSnapshot,
    version: VersionSnapshot,
    current: _Totals,
    before: _Totals | None,
    window: float,
) -> VersionPoint:
    if before is None or current.requests < before.requests or current.busy_ns < before.busy_ns:
        # first sight of this version, or new counters (a fresh load): they start from zero
        before = _Totals(0, 0, [0] * len(current.latency_counts), 0)
    latency = [a - b for a, b in zip(current.latency_counts, before.latency_counts, strict=True)]
    p50 = histogram_quantile(0.5, latency)
    p99 = histogram_quantile(0.99, latency)
    instances = max(version.instances, 1)
    busy = (current.busy_ns - before.busy_ns) * 1e-9 / (window * instances)
    return VersionPoint(
        state=model.state,
        throughput=(current.requests - before.requests) / window,
        errors=(current.failures - before.failures) / window,
        p50_ms=None if p50 is None else p50 / 1e6,
        p99_ms=None if p99 is None else p99 / 1e6,
        queue=version.pending,
        busy=min(max(busy, 0.0), 1.0),
        memory=version.memory,
    )
