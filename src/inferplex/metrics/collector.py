"""A Prometheus collector that reads the engine's per-model statistics when scraped.

Nothing is done per request beyond the counters the engine already keeps; names follow
Triton's (nv_inference_*) so existing dashboards work.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inferplex.core.engine import InferenceEngine

#: (metric name, help, statistics phase) for the cumulative durations in microseconds
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


class EngineCollector(Collector):
    def __init__(self, engine: InferenceEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        labels = ["model", "version"]
        success = CounterMetricFamily(
            "nv_inference_request_success", "Number of successful inference requests", labels=labels
        )
        failure = CounterMetricFamily(
            "nv_inference_request_failure", "Number of failed inference requests", labels=labels
        )
        count = CounterMetricFamily(
            "nv_inference_count", "Number of inferences performed (batch rows)", labels=labels
        )
        executions = CounterMetricFamily(
            "nv_inference_exec_count", "Number of model executions (batches)", labels=labels
        )
        durations = {
            phase: CounterMetricFamily(name, text, labels=labels)
            for name, text, phase in _DURATIONS
        }
        for stats in self._engine.model_statistics():
            key = [stats["name"], stats["version"]]
            phases = stats["inference_stats"]
            success.add_metric(key, phases["success"]["count"])
            failure.add_metric(key, phases["fail"]["count"])
            count.add_metric(key, stats["inference_count"])
            executions.add_metric(key, stats["execution_count"])
            for phase, family in durations.items():
                family.add_metric(key, phases[phase]["ns"] / 1000)
        ready = GaugeMetricFamily(
            "inferplex_model_ready", "1 if the model version is ready to serve", labels=labels
        )
        for entry in self._engine.repository_index():
            ready.add_metric([entry["name"], entry["version"]], entry["state"] == "READY")
        yield from (success, failure, count, executions, *durations.values(), ready)
