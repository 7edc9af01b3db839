"""The server's metrics, read from the engine's counters when scraped.

Nothing is done per request beyond the counters the engine already keeps. Names follow
Triton's (``nv_inference_*``, counters without a ``_total`` suffix) so dashboards written for
Triton work unchanged; ``inferplex_*`` names are ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferplex.core.engine import InferenceEngine

Labels = dict[str, str]


@dataclass
class Family:
    name: str
    kind: str  # "counter" or "gauge"
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)


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


def collect(engine: InferenceEngine) -> list[Family]:
    success = Family("nv_inference_request_success", "counter", "Successful inference requests")
    failure = Family("nv_inference_request_failure", "counter", "Failed inference requests")
    count = Family("nv_inference_count", "counter", "Inferences performed (batch rows)")
    executions = Family("nv_inference_exec_count", "counter", "Model executions (batches)")
    durations = {phase: Family(name, "counter", text) for name, text, phase in _DURATIONS}
    for stats in engine.model_statistics():
        labels = {"model": stats["name"], "version": stats["version"]}
        phases = stats["inference_stats"]
        success.samples.append((labels, phases["success"]["count"]))
        failure.samples.append((labels, phases["fail"]["count"]))
        count.samples.append((labels, stats["inference_count"]))
        executions.samples.append((labels, stats["execution_count"]))
        for phase, family in durations.items():
            family.samples.append((labels, phases[phase]["ns"] / 1000))
    ready = Family("inferplex_model_ready", "gauge", "1 if the model version is ready to serve")
    for entry in engine.repository_index():
        labels = {"model": entry["name"], "version": entry["version"]}
        ready.samples.append((labels, 1.0 if entry["state"] == "READY" else 0.0))
    return [success, failure, count, executions, *durations.values(), ready]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: list[Family]) -> bytes:
    """Prometheus text exposition format 0.0.4."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            text = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
            lines.append(f"{family.name}{{{text}}} {float(value)!r}")
    return ("\n".join(lines) + "\n").encode()
