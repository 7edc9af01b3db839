"""The sampler's windows and the dashboard's JSON document."""

from __future__ import annotations

import asyncio

import pytest

from inferplex.core.stats import ModelStats
from inferplex.engine.inference import InferenceEngine
from inferplex.metrics.dashboard import dashboard_data, load_static
from inferplex.metrics.sampler import Sampler
from tests.unit.metrics.conftest import add_sub


async def test_each_window_counts_only_its_own_requests(engine: InferenceEngine) -> None:
    sampler = Sampler(engine.snapshot, keep=3)
    await asyncio.gather(*(engine.infer(add_sub()) for _ in range(5)))
    first = sampler.sample().versions[("add_sub", "1")]
    assert first.throughput > 0 and first.errors == 0
    assert first.p50_ms is not None and first.p99_ms is not None
    assert 0 < first.p50_ms <= first.p99_ms
    assert first.queue == 0 and 0 < first.busy <= 1
    second = sampler.sample().versions[("add_sub", "1")]
    assert second.throughput == 0 and second.p99_ms is None and second.busy == 0
    for _ in range(3):
        sampler.sample()
    assert len(sampler.history) == 3  # bounded


async def test_a_quiet_engine_is_sampled_without_walking_its_models(
    engine: InferenceEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sampler = Sampler(engine.snapshot, activity=engine.activity)
    await engine.infer(add_sub())
    assert sampler.sample().versions[("add_sub", "1")].throughput > 0

    def walked() -> None:
        raise AssertionError("a quiet sample walked the models")

    monkeypatch.setattr(sampler, "snapshot", walked)
    quiet = [sampler.sample().versions[("add_sub", "1")] for _ in range(3)]
    assert all(p.throughput == 0 and p.busy == 0 and p.p99_ms is None for p in quiet)
    assert quiet[0].memory is not None  # what does not change by window is kept
    monkeypatch.undo()
    await engine.infer(add_sub())  # the count moves: the next sample walks again
    assert sampler.sample().versions[("add_sub", "1")].throughput > 0


async def test_the_sampler_ticks_on_the_loop(engine: InferenceEngine) -> None:
    sampler = Sampler(engine.snapshot, interval=0.01)
    sampler.start(asyncio.get_running_loop())
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while len(sampler.history) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
    finally:
        sampler.stop()
    assert len(sampler.history) >= 2


async def test_dashboard_data_aligns_every_series_on_the_sample_times(
    engine: InferenceEngine,
) -> None:
    sampler = Sampler(engine.snapshot)
    await engine.infer(add_sub())
    sampler.sample()
    sampler.sample()
    data = dashboard_data(engine.snapshot(), sampler)
    assert len(data["time"]) == 2
    models = {m["name"]: m for m in data["models"]}
    assert models["broken"]["state"] == "UNAVAILABLE" and models["broken"]["reason"]
    assert models["broken"]["versions"] == []
    (version,) = models["add_sub"]["versions"]
    assert version["version"] == "1"
    for name, values in version["series"].items():
        assert len(values) == 2, name
    assert version["series"]["throughput"][0] > 0
    assert len(data["server"]["series"]["rss"]) == 2
    assert data["server"]["gpus"] == []  # none given: a CPU machine


def test_the_page_ships_with_the_package() -> None:
    files = load_static()
    assert b'<script src="/dashboard/dashboard.js">' in files["index.html"]
    assert b'fetch("/dashboard/data"' in files["dashboard.js"]
    assert all(files.values())


async def test_new_counters_after_a_fresh_load_start_a_new_window(
    engine: InferenceEngine,
) -> None:
    sampler = Sampler(engine.snapshot)
    await asyncio.gather(*(engine.infer(add_sub()) for _ in range(3)))
    sampler.sample()
    version = engine.registry.entry("add_sub").versions[1]
    version.stats = ModelStats("add_sub", "1")  # what a fresh load of the version starts with
    await engine.infer(add_sub())
    point = sampler.sample().versions[("add_sub", "1")]
    assert point.throughput > 0 and point.p50_ms is not None  # not a negative delta
