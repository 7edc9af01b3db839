"""The server's metrics, read from the engine's counters when scraped.

Nothing is done per request beyond the counters and histogram buckets the engine already
keeps (core/stats.py). Names follow Triton's (``nv_inference_*``, counters without a
``_total`` suffix) so dashboards written for Triton work unchanged; ``inferplex_*`` names
are ours and follow the same convention. docs/observability.md lists every family.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from inferplex.backends.worker.model_metrics import MODEL_METRICS
from inferplex.core.snapshot import EngineSnapshot
from inferplex.core.stats import Histogram, ModelStats
from inferplex.lifecycle.memory import rss_bytes as process_tree_rss_bytes
from inferplex.metrics.exposition import Family, HistogramValue, Labels
from inferplex.metrics.generation import generation_families
from inferplex.metrics.http2 import Http2Counts, http2_families
from inferplex.metrics.listeners import listener_families
from inferplex.metrics.llm_families import llm_families
from inferplex.metrics.model_families import model_families
from inferplex.metrics.process import (
    GpuProbe,
    process_cpu_seconds,
    process_rss_bytes,
    system_memory_bytes,
)
from inferplex.metrics.sampler import Sampler, Snapshot, busy_ns
from inferplex.protocol.openai.stats import GENERATION
from inferplex.transport.interface import HttpServing

#: (metric name, help, statistics phase) of the cumulative durations in microseconds
_DURATIONS = (
    ("nv_inference_request_duration_us", "Cumulative request duration", "success"),
    ("nv_inference_queue_duration_us", "Cumulative time requests waited in queue", "queue"),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input time", "compute_input"),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference time",
        "compute_infer",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative compute output time",
        "compute_output",
    ),
)

#: upper bounds of the batch size histogram (rows per execution)
BATCH_SIZE_BOUNDS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@lru_cache(maxsize=16)
def _in_seconds(bounds_ns: tuple[int, ...]) -> tuple[float, ...]:
    return tuple(b / 1e9 for b in bounds_ns)


def _seconds(hist: Histogram) -> HistogramValue:
    return HistogramValue(_in_seconds(hist.bounds), hist.counts, hist.sum / 1e9)


def _batch_sizes(stats: ModelStats) -> HistogramValue:
    """Rows per execution, from the exact per-size counts the statistics already keep."""
    counts = [0] * (len(BATCH_SIZE_BOUNDS) + 1)
    total = 0
    for size, batch in stats.batches.items():
        executions = batch.compute_infer.count
        index = next((i for i, b in enumerate(BATCH_SIZE_BOUNDS) if size <= b), -1)
        counts[index] += executions
        total += size * executions
    return HistogramValue(BATCH_SIZE_BOUNDS, counts, float(total))


def _transition_family(snapshot: EngineSnapshot) -> Family:
    transitions = Family(
        "inferplex_model_state_transitions",
        "counter",
        "Model state changes since the start, by the state left and the state entered",
    )
    for change in snapshot.transitions:
        transitions.add({"from": change.source, "to": change.target}, change.count)
    return transitions


class Collector:
    """Builds every family on demand; one per server (it owns the GPU probe)."""

    def __init__(
        self,
        snapshot: Snapshot,
        sampler: Sampler | None = None,
        listeners: Sequence[HttpServing] = (),
        http2: Http2Counts | None = None,
        gpu_metrics: bool = True,
    ) -> None:
        """``snapshot`` reads the engine's models at each scrape; ``listeners``: the HTTP
        servers (a live list: read at each scrape); ``http2``: the gRPC port's transport
        counters; ``gpu_metrics`` False leaves the GPUs unread."""
        self.snapshot = snapshot
        self.sampler = sampler
        self.listeners = listeners
        self.http2 = http2
        self.gpus = GpuProbe(gpu_metrics)

    def collect(self) -> list[Family]:
        snapshot = self.snapshot()
        return [
            *self._model_families(snapshot),
            *llm_families(snapshot),
            *self._server_families(snapshot),
            _transition_family(snapshot),
            *listener_families(self.listeners),
            *http2_families(self.http2),
            *self._gpu_families(),
            *model_families(MODEL_METRICS),
            *generation_families(GENERATION),
        ]

    def close(self) -> None:
        self.gpus.close()

    def _model_families(self, snapshot: EngineSnapshot) -> list[Family]:
        success = Family("nv_inference_request_success", "counter", "Successful inference requests")
        failure = Family("nv_inference_request_failure", "counter", "Failed inference requests")
        cancelled = Family(
            "inferplex_inference_request_cancelled",
            "counter",
            "Requests whose callers went away before the answer (also counted as failures)",
        )
        count = Family("nv_inference_count", "counter", "Inferences performed (batch rows)")
        executions = Family("nv_inference_exec_count", "counter", "Model executions (batches)")
        durations = {phase: Family(name, "counter", text) for name, text, phase in _DURATIONS}
        pending = Family(
            "nv_inference_pending_request_count", "gauge", "Requests waiting in the model's queue"
        )
        request_hist = Family(
            "inferplex_request_duration_seconds",
            "histogram",
            "Duration of successful requests inside the server (validation to answer)",
        )
        queue_hist = Family(
            "inferplex_queue_duration_seconds", "histogram", "Time each request waited in queue"
        )
        compute_hists = [
            Family(
                f"inferplex_compute_{phase}_duration_seconds",
                "histogram",
                f"Compute {phase} time per model execution (batch)",
            )
            for phase in ("input", "infer", "output")
        ]
        batch_size = Family("inferplex_batch_size", "histogram", "Rows per model execution")
        instances = Family("inferplex_model_instances", "gauge", "Instances serving the version")
        busy = Family(
            "inferplex_model_busy_seconds",
            "counter",
            "Seconds the version's instances spent running batches (all instances summed)",
        )
        busy_ratio = Family(
            "inferplex_model_busy_ratio",
            "gauge",
            "Share of the last sampling window the version's instances were busy, 0..1",
        )
        memory = Family(
            "inferplex_model_memory_bytes", "gauge", "Memory the version took when loaded"
        )
        inflight = Family(
            "inferplex_model_inflight_requests", "gauge", "Requests accepted and not answered"
        )
        latest = self.sampler.latest if self.sampler is not None else None
        for model, version in snapshot.served():
            stats = version.stats
            labels: Labels = {"model": model.name, "version": version.version}
            phases = stats.phases
            success.add(labels, phases["success"].count)
            failure.add(labels, phases["fail"].count)
            cancelled.add(labels, stats.cancelled)
            count.add(labels, stats.inference_count)
            executions.add(labels, stats.execution_count)
            for phase, family in durations.items():
                family.add(labels, phases[phase].ns / 1000)
            pending.add(labels, version.pending)
            request_hist.add_histogram(labels, _seconds(stats.request_hist))
            queue_hist.add_histogram(labels, _seconds(stats.queue_hist))
            for family, hist in zip(compute_hists, stats.compute_hists, strict=True):
                family.add_histogram(labels, _seconds(hist))
            batch_size.add_histogram(labels, _batch_sizes(stats))
            instances.add(labels, version.instances)
            busy.add(labels, busy_ns(stats) / 1e9)
            point = latest.versions.get((model.name, version.version)) if latest else None
            if point is not None:
                busy_ratio.add(labels, point.busy)
            if version.memory is not None:
                memory.add(labels, version.memory)
            inflight.add(labels, version.in_flight)
        ready = Family("inferplex_model_ready", "gauge", "1 if the model version is ready to serve")
        state = Family(
            "inferplex_model_state", "gauge", "1 for the state the model is in (state label)"
        )
        for model in snapshot.models:
            is_ready = 1.0 if model.state == "READY" else 0.0
            for served in model.versions:
                ready.add({"model": model.name, "version": served.version}, is_ready)
            if not model.versions:
                ready.add({"model": model.name, "version": ""}, 0.0)
            state.add({"model": model.name, "state": model.state}, 1.0)
        return [
            success,
            failure,
            cancelled,
            count,
            executions,
            *durations.values(),
            pending,
            request_hist,
            queue_hist,
            *compute_hists,
            batch_size,
            instances,
            busy,
            busy_ratio,
            memory,
            inflight,
            ready,
            state,
        ]

    def _server_families(self, snapshot: EngineSnapshot) -> list[Family]:
        cpu_seconds = Family(
            "inferplex_process_cpu_seconds", "counter", "User + system CPU seconds of the server"
        )
        cpu_seconds.add({}, process_cpu_seconds())
        rss = Family("inferplex_process_resident_memory_bytes", "gauge", "Server resident memory")
        rss_bytes = process_rss_bytes()
        if rss_bytes is not None:
            rss.add({}, rss_bytes)
        tree_rss = Family(
            "inferplex_process_tree_resident_memory_bytes",
            "gauge",
            "Resident memory of the server and its worker processes (Python and isolated "
            "models), as --process-memory-limit counts it",
        )
        tree_rss.add({}, process_tree_rss_bytes())
        cpu = Family(
            "inferplex_process_cpu_utilization",
            "gauge",
            "Server CPU use over the last sampling window, share of all cores 0..1",
        )
        system_cpu = Family(
            "nv_cpu_utilization", "gauge", "Machine CPU utilisation over the last window, 0..1"
        )
        inflight = Family(
            "inferplex_inflight_requests", "gauge", "Requests accepted and not answered, all models"
        )
        latest = self.sampler.latest if self.sampler is not None else None
        if latest is not None:
            if latest.server.cpu is not None:
                cpu.add({}, latest.server.cpu)
            if latest.server.system_cpu is not None:
                system_cpu.add({}, latest.server.system_cpu)
        inflight.add({}, sum(version.in_flight for _, version in snapshot.served()))
        memory_total = Family("nv_cpu_memory_total_bytes", "gauge", "Machine memory")
        memory_used = Family("nv_cpu_memory_used_bytes", "gauge", "Machine memory in use")
        memory = system_memory_bytes()
        if memory is not None:
            memory_total.add({}, memory[0])
            memory_used.add({}, memory[1])
        return [cpu_seconds, rss, tree_rss, cpu, system_cpu, inflight, memory_total, memory_used]

    def _gpu_families(self) -> list[Family]:
        if not self.gpus.available:
            return []
        utilization = Family("nv_gpu_utilization", "gauge", "GPU utilisation, 0..1")
        total = Family("nv_gpu_memory_total_bytes", "gauge", "GPU memory")
        used = Family("nv_gpu_memory_used_bytes", "gauge", "GPU memory in use")
        power = Family("nv_gpu_power_usage", "gauge", "GPU power draw in watts")
        for reading in self.gpus.read():
            labels = {"gpu_uuid": reading.uuid}
            utilization.add(labels, reading.utilization)
            total.add(labels, reading.memory_total)
            used.add(labels, reading.memory_used)
            if reading.power_watts is not None:
                power.add(labels, reading.power_watts)
        return [utilization, total, used, power]
