"""Memory in bytes: eviction order, pinning, the error when nothing can make room, and
unloading returning the memory (RSS before load, after load, after unload)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import InsufficientMemoryError
from inferplex.lifecycle.memory import release_free_memory, rss_bytes
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor
from tests.support.lifecycle import add_model, add_sub_request

MB = 1_000_000
#: each model's version folder holds this much: its footprint is at least its size on disk,
#: and add_sub itself takes far less, so the footprints are known to the test
PADDING = 20 * MB


def padded_model(repo: Path, name: str, padding: int = PADDING, **extra: object) -> None:
    add_model(repo, name, **extra)
    with (repo / name / "1" / "padding.bin").open("wb") as file:
        file.truncate(padding)  # sparse: quick to write, its size is what counts


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[InferenceEngine]:
    for name in ("a", "b", "c"):
        padded_model(tmp_path, name)
    pinned = [{"key": "pinned", "value": {"string_value": "true"}}]
    padded_model(tmp_path, "pinned_by_config", parameters=pinned)
    padded_model(tmp_path, "huge", padding=60 * MB)
    config = ServerConfig(
        model_repository=tmp_path, model_control_mode="explicit", memory_limit="50MB"
    )
    engine = build_engine(config)
    await engine.start()
    yield engine
    await engine.stop()


def loaded(engine: InferenceEngine) -> list[str]:
    return [m["name"] for m in engine.memory()["models"]]


async def test_least_recently_used_idle_model_is_evicted(engine: InferenceEngine) -> None:
    await engine.load_model("a", {})
    await engine.load_model("b", {})
    await engine.infer(add_sub_request("b"))
    await engine.infer(add_sub_request("a"))  # b is now the least recently used
    report = engine.memory()
    assert report["limit"] == 50 * MB
    assert all(m["bytes"] >= PADDING for m in report["models"])
    await engine.load_model("c", {})
    assert loaded(engine) == ["a", "c"]
    b = next(r for r in engine.repository_index() if r["name"] == "b")
    assert b["state"] == "UNAVAILABLE"
    assert b["reason"] == "evicted to make room for 'c' (--memory-limit)"
    assert engine.memory()["used"] <= 50 * MB


async def test_pinned_models_stay(engine: InferenceEngine) -> None:
    await engine.load_model("a", {"pinned": True})
    await engine.load_model("pinned_by_config", {})
    with pytest.raises(InsufficientMemoryError) as caught:
        await engine.load_model("b", {})
    message = caught.value.message
    assert "cannot load model 'b'" in message and "--memory-limit" in message
    assert "'a'" in message and "'pinned_by_config'" in message and "pinned" in message
    assert loaded(engine) == ["a", "pinned_by_config"]
    await engine.load_model("a", {"pinned": False})  # unpins (and changes nothing else)
    await engine.load_model("b", {})
    assert loaded(engine) == ["b", "pinned_by_config"]


async def test_a_model_larger_than_the_limit_evicts_nothing(engine: InferenceEngine) -> None:
    await engine.load_model("a", {})
    with pytest.raises(InsufficientMemoryError, match="cannot load model 'huge'"):
        await engine.load_model("huge", {})
    assert loaded(engine) == ["a"]
    row = next(r for r in engine.repository_index() if r["name"] == "huge")
    assert row["state"] == "UNAVAILABLE" and "--memory-limit" in row["reason"]


async def test_unloading_returns_the_memory(tmp_path: Path) -> None:
    path = modelgen.mlp(tmp_path, "big", features=1024, hidden=(1536, 1536))
    write_config(tmp_path / "big", modelgen.model_config(path, max_batch_size=8))
    size = path.stat().st_size
    config = ServerConfig(model_repository=tmp_path, model_control_mode="explicit")
    engine = build_engine(config)
    await engine.start()
    try:
        # freed heap of earlier tests in this process is handed back first: reused, it would
        # hold the weights without the RSS growing (the suite failed so in a long run)
        release_free_memory()
        before = rss_bytes()
        await engine.load_model("big", {})
        after_load = rss_bytes()
        (model,) = engine.memory()["models"]
        await engine.unload_model("big", {})
        after_unload = rss_bytes()
    finally:
        await engine.stop()
    grown = after_load - before
    assert grown >= size  # the weights are in memory
    assert model["bytes"] >= size
    if release_free_memory():  # glibc: freed heap goes back to the system
        assert after_unload - before < grown / 2, (before, after_load, after_unload)


#: a Python model of a few hundred bytes whose worker holds 80 MB once it has started
BALLAST = """
import numpy as np
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def initialize(self, context):
        self.ballast = np.ones(80_000_000, dtype=np.uint8)  # written: resident

    def inference(self, data):
        return {"OUTPUT0": data["INPUT0"]}
"""

BALLAST_CONFIG = """
name: "ballast"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


async def test_a_reload_after_unloading_is_estimated_at_its_last_footprint(
    tmp_path: Path,
) -> None:
    _ballast(tmp_path)
    # ballast holds 80 MB and the worker's own memory: anywhere in (80, 140] MB, it fits
    # with one of a and b (60 MB each) under the limit, not with both
    for name in ("a", "b"):
        padded_model(tmp_path, name, padding=60 * MB)
    config = ServerConfig(
        model_repository=tmp_path, model_control_mode="explicit", memory_limit="200MB"
    )
    engine = build_engine(config)
    await engine.start()
    try:
        await engine.load_model("ballast", {})
        (model,) = engine.memory()["models"]
        assert model["bytes"] >= 80 * MB
        await engine.unload_model("ballast", {})
        await engine.load_model("a", {"pinned": True})
        await engine.load_model("b", {"pinned": True})
        # its files (a few hundred bytes) would fit; its last footprint does not
        with pytest.raises(InsufficientMemoryError, match="cannot load model 'ballast'"):
            await engine.load_model("ballast", {})
        assert loaded(engine) == ["a", "b"]
        assert engine.memory()["used"] <= 200 * MB
        await engine.unload_model("b", {})
        (tmp_path / "ballast" / "1" / "model.py").write_text(BALLAST + "\n# changed\n")
        await engine.load_model("ballast", {})  # new files: estimated at their size again
        assert sorted(loaded(engine)) == ["a", "ballast"]
    finally:
        await engine.stop()


async def test_the_process_limit_counts_the_servers_own_memory(tmp_path: Path) -> None:
    """--process-memory-limit weighs the whole RSS, the server's own memory included: a load
    evicts idle models until the RSS plus its estimate fits; when even evicting every one
    could not make room, it fails naming the server's own memory and evicts nothing."""
    _mlps(tmp_path, "m1", "m2", "m3")
    config = ServerConfig(model_repository=tmp_path, model_control_mode="explicit")
    engine = build_engine(config)
    await engine.start()
    budgets = engine.lifecycle.loader.budgets
    try:
        await engine.load_model("m1", {})
        await engine.load_model("m2", {})
        await engine.infer(_features("m1"))  # m2 is the least recently used
        # m3 (its files' 16 MB) fits once an idle model is gone, not before
        budgets.process_memory_limit = rss_bytes() + 8 * MB
        assert engine.memory()["process_limit"] == budgets.process_memory_limit
        await engine.load_model("m3", {})
        rows = {r["name"]: r for r in engine.repository_index()}
        assert rows["m2"]["reason"] == "evicted to make room for 'm3' (--process-memory-limit)"
        assert loaded(engine)[-1] == "m3"
        # the server's own memory (the RSS less the footprints) cannot be evicted
        kept = loaded(engine)
        budgets.process_memory_limit = rss_bytes() - engine.memory()["used"] + 8 * MB
        with pytest.raises(InsufficientMemoryError) as caught:
            await engine.load_model("m2", {})
        message = caught.value.message
        assert "cannot load model 'm2'" in message and "--process-memory-limit" in message
        assert "'(the server's own memory)'" in message
        assert loaded(engine) == kept
    finally:
        await engine.stop()


def _mlps(repo: Path, *names: str) -> None:
    """MLPs of 16 MB each (1024 features, two hidden layers of 1536) under ``names``."""
    for name in names:
        path = modelgen.mlp(repo, name, features=1024, hidden=(1536, 1536))
        write_config(repo / name, modelgen.model_config(path, max_batch_size=8))


def _ballast(repo: Path) -> None:
    """The Python model 'ballast' (BALLAST): a few hundred bytes that hold 80 MB loaded."""
    (repo / "ballast" / "1").mkdir(parents=True)
    (repo / "ballast" / "1" / "model.py").write_text(BALLAST)
    (repo / "ballast" / "config.pbtxt").write_text(BALLAST_CONFIG)


def _features(model: str) -> InferenceRequest:
    x = np.zeros((1, 1024), dtype=np.float32)
    return InferenceRequest(model, [Tensor("features", "FP32", x.shape, x)])


async def test_a_first_load_over_the_process_limit_is_refused_after_all(tmp_path: Path) -> None:
    """Its files (a few hundred bytes) fit, what it holds once loaded (80 MB) does not: the
    model was left loaded with the server over --process-memory-limit and a warning that it
    'needs about 0 bytes'. It is unloaded again, the load fails naming what happened, and
    the next try is estimated at its measured footprint."""
    _ballast(tmp_path)
    config = ServerConfig(model_repository=tmp_path, model_control_mode="explicit")
    engine = build_engine(config)
    await engine.start()
    budgets = engine.lifecycle.loader.budgets
    try:
        budgets.process_memory_limit = rss_bytes() + 40 * MB
        with pytest.raises(InsufficientMemoryError) as caught:
            await engine.load_model("ballast", {})
        message = caught.value.message
        assert "model 'ballast' took more memory than estimated" in message, message
        assert "'ballast'" in message and "(just loaded)" in message, message
        assert "--process-memory-limit" in message and "unloaded again" in message
        assert "needs about 0 bytes" not in message
        assert loaded(engine) == []
        (row,) = engine.repository_index()
        assert row["state"] == "UNAVAILABLE" and "took more memory" in row["reason"]
        with pytest.raises(InsufficientMemoryError, match="cannot load model 'ballast': it needs"):
            await engine.load_model("ballast", {})  # refused before it loads, this time
    finally:
        await engine.stop()


async def test_a_refused_reload_names_the_serving_copy_as_serving(tmp_path: Path) -> None:
    _mlps(tmp_path, "m1")
    config = ServerConfig(model_repository=tmp_path, model_control_mode="explicit")
    engine = build_engine(config)
    await engine.start()
    budgets = engine.lifecycle.loader.budgets
    try:
        await engine.load_model("m1", {})
        budgets.memory_limit = engine.memory()["used"] + MB  # no room for a second copy
        with pytest.raises(InsufficientMemoryError) as caught:
            await engine.load_model("m1", {"config": '{"max_batch_size": 4}'})
        assert "'m1'" in caught.value.message
        assert "(serving while it reloads)" in caught.value.message, caught.value.message
        assert loaded(engine) == ["m1"]
    finally:
        await engine.stop()
