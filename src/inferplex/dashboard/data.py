"""What the dashboard page polls: models, versions and states, and the sampler's history
as one array per series, aligned on the sample times."""

from __future__ import annotations

from importlib import resources
from typing import Any

from inferplex.core.engine import InferenceEngine
from inferplex.metrics.process import GpuReading
from inferplex.metrics.sampler import Sampler, VersionPoint

#: dashboard file name -> content type
STATIC_FILES = {
    "index.html": b"text/html; charset=utf-8",
    "dashboard.js": b"text/javascript; charset=utf-8",
    "dashboard.css": b"text/css; charset=utf-8",
}

_SERIES = ("throughput", "errors", "p50_ms", "p99_ms", "queue", "busy", "memory")


def load_static() -> dict[str, bytes]:
    """The page's files, read once from the package."""
    folder = resources.files("inferplex.dashboard") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC_FILES}


def dashboard_data(
    engine: InferenceEngine, sampler: Sampler, gpus: list[GpuReading] | None = None
) -> dict[str, Any]:
    """The JSON document of ``GET /dashboard/data``; ``gpus`` are NVML's readings now."""
    history = list(sampler.history)
    times = [round(s.time, 3) for s in history]
    server = {
        "name": engine.config.server_name,
        "interval_s": sampler.interval,
        "ready": engine.ready(),
        "gpus": [
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "utilization": gpu.utilization,
                "memory_used": gpu.memory_used,
                "memory_total": gpu.memory_total,
            }
            for gpu in gpus or []
        ],
        "series": {
            "cpu": [s.server.cpu for s in history],
            "system_cpu": [s.server.system_cpu for s in history],
            "rss": [s.server.rss for s in history],
            "inflight": [s.server.inflight for s in history],
        },
    }
    models: list[dict[str, Any]] = []
    for entry in engine.registry.entries():
        versions = []
        for number in sorted(entry.versions):
            version = entry.versions[number]
            key = (entry.name, version.version_str)
            points: list[VersionPoint | None] = [s.versions.get(key) for s in history]
            versions.append(
                {
                    "version": version.version_str,
                    "instances": len(version.instances),
                    "queue": version.queue.pending_requests,
                    "series": {
                        name: [None if p is None else getattr(p, name) for p in points]
                        for name in _SERIES
                    },
                }
            )
        models.append(
            {
                "name": entry.name,
                "state": entry.state.value,
                "reason": entry.reason,
                "versions": versions,
            }
        )
    return {"time": times, "server": server, "models": models}
