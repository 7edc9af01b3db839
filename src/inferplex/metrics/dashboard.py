"""What the dashboard page polls: models, versions and states, and the sampler's history
as one array per series, aligned on the sample times. The page itself (HTML, JS, CSS) is
package data of ``inferplex.dashboard``."""

from __future__ import annotations

from importlib import resources
from typing import Any

from inferplex.backends.engine_stats import EngineStats, HistogramCounts
from inferplex.core.snapshot import EngineSnapshot
from inferplex.metrics.generation import generation_data
from inferplex.metrics.process import GpuReading
from inferplex.metrics.sampler import Sampler, VersionPoint, histogram_quantile
from inferplex.protocol.openai.stats import GENERATION

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
    snapshot: EngineSnapshot, sampler: Sampler, gpus: list[GpuReading] | None = None
) -> dict[str, Any]:
    """The JSON document of ``GET /dashboard/data`` of the engine's ``snapshot``; ``gpus``
    are NVML's readings now."""
    history = list(sampler.history)
    times = [round(s.time, 3) for s in history]
    server = {
        "name": snapshot.server_name,
        "interval_s": sampler.interval,
        "ready": snapshot.ready,
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
            "tree_rss": [s.server.tree_rss for s in history],
            "inflight": [s.server.inflight for s in history],
        },
    }
    models: list[dict[str, Any]] = []
    for model in snapshot.models:
        versions = []
        for version in model.versions:
            key = (model.name, version.version)
            points: list[VersionPoint | None] = [s.versions.get(key) for s in history]
            versions.append(
                {
                    "version": version.version,
                    "instances": version.instances,
                    "queue": version.pending,
                    "series": {
                        name: [None if p is None else getattr(p, name) for p in points]
                        for name in _SERIES
                    },
                    "llm": None if version.llm_engine is None else _llm(version.llm_engine),
                }
            )
        models.append(
            {
                "name": model.name,
                "state": model.state,
                "reason": model.reason,
                "versions": versions,
            }
        )
    return {
        "time": times,
        "server": server,
        "models": models,
        "generation": generation_data(GENERATION),
    }


def _quantile_ms(q: float, hist: HistogramCounts) -> float | None:
    bounds_ns = tuple(round(b * 1e9) for b in hist.bounds)
    value = histogram_quantile(q, list(hist.counts), bounds_ns)
    return None if value is None else value / 1e6


def _llm(stats: EngineStats) -> dict[str, Any]:
    """An LLM engine's row: its state now, totals and token latencies since it started (the
    page turns the generated tokens into tokens/s between two polls)."""
    ttft, itl = stats.time_to_first_token, stats.inter_token_latency
    return {
        "running": stats.running,
        "waiting": stats.waiting,
        "kv_blocks_used": stats.kv_blocks_used,
        "kv_blocks_total": stats.kv_blocks_total,
        "prefix_hit_rate": stats.prefix_hit_rate,
        "preemptions": stats.preemptions,
        "generated_tokens": stats.generated_tokens,
        "ttft_p50_ms": _quantile_ms(0.5, ttft),
        "ttft_p99_ms": _quantile_ms(0.99, ttft),
        "itl_p50_ms": _quantile_ms(0.5, itl),
        "itl_p99_ms": _quantile_ms(0.99, itl),
    }
