"""InferenceEngine on fakes: what it asks of its collaborators, built without a repository,
a loader or a socket (as vLLM's scheduler tests build a scheduler)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.config.server_config import ServerConfig
from inferplex.core.registry import ModelRegistry, ModelState, ModelStatus
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import ModelNotFoundError
from inferplex.types import InferenceRequest, InferenceResponse


class FakeVersion:
    """A served version that answers every request with no outputs."""

    def __init__(self, name: str, version: int = 1) -> None:
        self.config = ModelConfig(name=name)
        self.version_str = str(version)
        self.in_flight = 0
        self.requests: list[InferenceRequest] = []

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.requests.append(request)
        return InferenceResponse(self.config.name, self.version_str, [], request.id)

    def statistics(self) -> dict[str, Any]:
        return {"name": self.config.name, "version": self.version_str}


class FakeLifecycle:
    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self.calls: list[tuple[Any, ...]] = []
        self.before_scan: Any = None

    async def start(self, dispatcher: Any, cache: Any, caller: Any) -> None:
        self.calls.append(("start", cache))
        self.publish("a")

    async def stop(self, drain_timeout: float | None) -> None:
        self.calls.append(("stop", drain_timeout))

    async def load(self, name: str, parameters: Mapping[str, Any]) -> None:
        self.calls.append(("load", name))

    async def load_for_request(self, name: str, version: str) -> FakeVersion:
        self.calls.append(("load_for_request", name))
        return self.publish(name)

    def publish(self, name: str) -> FakeVersion:
        entry = self.registry.add(name)
        served = FakeVersion(name)
        self.registry.publish(entry, ModelStatus(ModelState.READY, ""), {1: cast(Any, served)})
        return served


class FakeGuards:
    def get(self, config: ModelConfig) -> None:
        return None  # no breaker, no timeout: requests go straight to the version

    def is_open(self, name: str) -> bool:
        return False

    def statistics(self, name: str) -> dict[str, Any] | None:
        return {"state": "closed"} if name == "a" else None


class FakeRoutes:
    def __init__(self, serve: Any, queued: Any, breaker_open: Any, config_of: Any) -> None:
        self.wired = (serve, queued, breaker_open, config_of)
        self.reloads: list[list[str]] = []
        self.closed = False

    def get(self, name: str) -> None:
        return None

    async def reload(self, repository: Path, names: list[str]) -> bool:
        self.reloads.append(list(names))
        return True

    async def close(self) -> None:
        self.closed = True


class FakeSharedMemory:
    enabled = False
    closed = False

    def close(self) -> None:
        self.closed = True


class FakeRemote:
    refreshes = 0

    def refresh(self) -> bool:
        self.refreshes += 1
        return True


def build(repository: Path, **settings: Any) -> tuple[InferenceEngine, FakeLifecycle, FakeRemote]:
    registry = ModelRegistry()
    lifecycle = FakeLifecycle(registry)
    remote = FakeRemote()
    engine = InferenceEngine(
        ServerConfig(model_repository=repository, **settings),
        registry=registry,
        lifecycle=cast(Any, lifecycle),
        guards=cast(Any, FakeGuards()),
        routes=cast(Any, FakeRoutes),
        shared_memory=cast(Any, FakeSharedMemory()),
        remote=cast(Any, remote),
    )
    return engine, lifecycle, remote


async def test_start_serve_and_stop_through_the_collaborators(tmp_path: Path) -> None:
    engine, lifecycle, remote = build(tmp_path)
    routes = cast(FakeRoutes, engine.routes)
    assert routes.wired == (
        engine.serve,
        engine._queued,
        engine.guards.is_open,
        engine._config_of,
    )
    assert lifecycle.before_scan == engine._before_scan
    assert not engine.ready()
    await engine.start()
    assert engine.ready() and remote.refreshes == 1
    assert lifecycle.calls == [("start", None)] and routes.reloads == [["a"]]
    response = await engine.infer(InferenceRequest("a", [], id="r1"))
    assert (response.model_name, response.id) == ("a", "r1")
    assert engine.model_ready("a") and engine.repository_index() == [
        {"name": "a", "version": "1", "state": "READY", "reason": ""}
    ]
    assert engine.model_statistics("a") == [
        {"name": "a", "version": "1", "circuit_breaker": {"state": "closed"}}
    ]
    await engine.load_model("b", {})  # an s3:// repository is synced before a load
    assert remote.refreshes == 2 and lifecycle.calls[-1] == ("load", "b")
    await engine.stop(1.5)
    assert not engine.ready() and routes.closed
    assert lifecycle.calls[-1] == ("stop", 1.5)
    assert cast(FakeSharedMemory, engine.shared_memory).closed


async def test_a_model_not_served_loads_on_demand_only_when_asked(tmp_path: Path) -> None:
    engine, lifecycle, _ = build(tmp_path)
    with pytest.raises(ModelNotFoundError):
        await engine.infer(InferenceRequest("b", []))
    engine, lifecycle, _ = build(tmp_path, load_on_demand=True)
    response = await engine.infer(InferenceRequest("b", []))
    assert response.model_name == "b" and lifecycle.calls == [("load_for_request", "b")]


async def test_strict_readiness_needs_every_model_asked_for_ready(tmp_path: Path) -> None:
    engine, _, _ = build(tmp_path, strict_readiness=True, server_name="triton")
    await engine.start()
    assert engine.server_metadata()["name"] == "triton"
    entry = engine.registry.get("a")
    assert entry is not None and engine.ready()
    engine.registry.add("never_asked")  # in the index, never loaded: does not count
    assert engine.ready()
    for state in (ModelState.LOADING, ModelState.UNLOADING):
        engine.registry.publish(entry, ModelStatus(state, ""))
        assert not engine.ready()
    failed = ModelStatus(ModelState.UNAVAILABLE, "bad", load_failed=True)  # its load failed
    engine.registry.publish(entry, failed)
    assert not engine.ready()
    one = ModelStatus(ModelState.READY, "", failed={2: "version 2: bad file"})  # one failed
    engine.registry.publish(entry, one)
    assert not engine.ready()
    engine.registry.publish(entry, ModelStatus(ModelState.UNAVAILABLE, "unloaded"))
    assert engine.ready()
    lenient, _, _ = build(tmp_path)
    await lenient.start()
    entry = lenient.registry.get("a")
    assert entry is not None
    lenient.registry.publish(entry, failed)
    assert lenient.ready() and lenient.server_metadata()["name"] == "inferplex"
