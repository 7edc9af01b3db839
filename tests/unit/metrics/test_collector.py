"""/metrics families read from a real engine."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import psutil
from prometheus_client.parser import text_string_to_metric_families

from inferplex.core.snapshot import (
    EngineSnapshot,
    ModelSnapshot,
    TransitionCount,
    VersionSnapshot,
)
from inferplex.core.stats import ModelStats
from inferplex.engine.inference import InferenceEngine
from inferplex.metrics.collector import Collector
from inferplex.metrics.exposition import render
from inferplex.metrics.sampler import Sampler
from tests.unit.metrics.conftest import add_sub

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(collector: Collector) -> Samples:
    text = render(collector.collect()).decode()
    # the parser names counter samples <name>_total; ours have no suffix, like Triton's
    return {
        (family.name if family.type == "counter" else s.name, tuple(sorted(s.labels.items()))): (
            s.value
        )
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labels(**extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"model": "add_sub", "version": "1", **extra}.items()))


async def test_histograms_gauges_and_counters_follow_requests(engine: InferenceEngine) -> None:
    sampler = Sampler(engine.snapshot)
    collector = Collector(engine.snapshot, sampler)
    await asyncio.gather(*(engine.infer(add_sub(rows)) for rows in (1, 2, 3)))
    sampler.sample()
    samples = scrape(collector)
    assert samples[("nv_inference_request_success", labels())] == 3
    assert samples[("nv_inference_count", labels())] == 6
    assert samples[("inferplex_request_duration_seconds_count", labels())] == 3
    assert samples[("inferplex_queue_duration_seconds_count", labels())] == 3
    executions = samples[("nv_inference_exec_count", labels())]
    assert samples[("inferplex_compute_infer_duration_seconds_count", labels())] == executions
    assert samples[("inferplex_batch_size_count", labels())] == executions
    assert samples[("inferplex_batch_size_sum", labels())] == 6
    assert samples[("inferplex_batch_size_bucket", labels(le="+Inf"))] == executions
    assert samples[("nv_inference_pending_request_count", labels())] == 0
    assert samples[("inferplex_model_inflight_requests", labels())] == 0
    assert samples[("inferplex_model_instances", labels())] >= 1
    assert samples[("inferplex_model_busy_seconds", labels())] > 0
    assert 0 < samples[("inferplex_model_busy_ratio", labels())] <= 1
    assert samples[("inferplex_model_ready", labels())] == 1
    assert samples[("inferplex_model_ready", (("model", "broken"), ("version", "")))] == 0
    state = (("model", "broken"), ("state", "UNAVAILABLE"))
    assert samples[("inferplex_model_state", state)] == 1
    assert samples[("inferplex_process_cpu_seconds", ())] > 0
    assert samples[("inferplex_process_resident_memory_bytes", ())] > 10**6
    assert 0 <= samples[("inferplex_process_cpu_utilization", ())] <= 1
    assert samples[("inferplex_inflight_requests", ())] == 0
    assert samples[("nv_cpu_memory_total_bytes", ())] >= samples[("nv_cpu_memory_used_bytes", ())]
    collector.close()


def test_the_tree_s_resident_memory_counts_the_worker_processes(engine: InferenceEngine) -> None:
    """The dashboard's and /metrics' RSS counted only the main process, while the memory
    limits count the workers too (Python models run in child processes)."""
    collector = Collector(engine.snapshot, Sampler(engine.snapshot))
    code = "import sys; blob = bytearray(64 << 20); sys.stdin.read()"  # 64 MiB, touched
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE) as worker:
        try:
            child = psutil.Process(worker.pid)
            deadline = time.monotonic() + 60
            while child.memory_info().rss < 64 << 20:
                assert time.monotonic() < deadline, "the child never held its 64 MiB"
                time.sleep(0.01)
            samples = scrape(collector)
            own = samples[("inferplex_process_resident_memory_bytes", ())]
            tree = samples[("inferplex_process_tree_resident_memory_bytes", ())]
            assert tree >= own + (64 << 20) * 0.9
        finally:
            worker.communicate(b"")
    collector.close()


async def test_in_flight_requests_and_queue_are_read_at_scrape_time(
    engine: InferenceEngine,
) -> None:
    collector = Collector(engine.snapshot)
    pending = [asyncio.ensure_future(engine.infer(add_sub())) for _ in range(4)]
    await asyncio.sleep(0)  # every request is accepted; none has been answered yet
    samples = scrape(collector)
    assert samples[("inferplex_inflight_requests", ())] == 4
    assert samples[("inferplex_model_inflight_requests", labels())] == 4
    await asyncio.gather(*pending)
    assert scrape(collector)[("inferplex_inflight_requests", ())] == 0


async def test_no_gpu_families_without_nvml(engine: InferenceEngine) -> None:
    collector = Collector(engine.snapshot)
    names = {family.name for family in collector.collect()}
    assert ("nv_gpu_utilization" in names) == collector.gpus.available


def test_families_come_from_the_snapshot_alone() -> None:
    """No engine, no registry: what the snapshot says is what /metrics shows."""
    stats = ModelStats("a", "2")
    stats.record_request(True, 5_000)
    served = VersionSnapshot("2", stats, pending=3, instances=2, in_flight=4, memory=1 << 20)
    snapshot = EngineSnapshot(
        "test",
        True,
        (
            ModelSnapshot("a", "READY", "", (served,)),
            ModelSnapshot("b", "UNAVAILABLE", "failed", ()),
        ),
        (TransitionCount("LOADING", "READY", 1), TransitionCount("UNAVAILABLE", "LOADING", 2)),
    )
    collector = Collector(lambda: snapshot)
    samples = scrape(collector)
    a = tuple(sorted({"model": "a", "version": "2"}.items()))
    assert samples[("nv_inference_request_success", a)] == 1
    assert samples[("nv_inference_pending_request_count", a)] == 3
    assert samples[("inferplex_model_instances", a)] == 2
    assert samples[("inferplex_model_inflight_requests", a)] == 4
    assert samples[("inferplex_model_memory_bytes", a)] == 1 << 20
    assert samples[("inferplex_inflight_requests", ())] == 4
    assert samples[("inferplex_model_ready", a)] == 1
    assert samples[("inferplex_model_ready", (("model", "b"), ("version", "")))] == 0
    assert samples[("inferplex_model_state", (("model", "b"), ("state", "UNAVAILABLE")))] == 1
    transitions = "inferplex_model_state_transitions"
    assert samples[(transitions, (("from", "UNAVAILABLE"), ("to", "LOADING")))] == 2
    assert samples[(transitions, (("from", "LOADING"), ("to", "READY")))] == 1
    collector.close()


async def test_state_transitions_are_counted_from_the_engine(engine: InferenceEngine) -> None:
    samples = scrape(Collector(engine.snapshot))
    counted = {
        (dict(labels)["from"], dict(labels)["to"]): value
        for (name, labels), value in samples.items()
        if name == "inferplex_model_state_transitions"
    }
    # add_sub loaded, broken failed to
    assert counted == {
        ("UNAVAILABLE", "LOADING"): 2,
        ("LOADING", "READY"): 1,
        ("LOADING", "UNAVAILABLE"): 1,
    }
