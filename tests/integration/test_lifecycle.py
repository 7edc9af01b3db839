"""Model lifecycle on the engine with real ONNX Runtime models, without sockets: version
policies, control modes, hot reload, warm-up, runtime management, the API's error paths."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import (
    ConfigError,
    InvalidInputError,
    ModelControlDisabledError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
)
from inferplex.lifecycle import pacing
from inferplex.repository.local import fingerprint
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor
from tests.support.lifecycle import (
    add_model,
    add_sub_config,
    add_sub_request,
    add_version,
    break_version,
    eventually,
    remove_version,
)

Engine = Callable[..., Any]


@asynccontextmanager
async def running(repo: Path, **settings: Any) -> AsyncIterator[InferenceEngine]:
    engine = build_engine(ServerConfig(model_repository=repo, **settings))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


def index(engine: InferenceEngine) -> dict[tuple[str, str], tuple[str, str]]:
    return {(r["name"], r["version"]): (r["state"], r["reason"]) for r in engine.repository_index()}


async def served_version(engine: InferenceEngine, model: str = "add_sub") -> str:
    response = await engine.infer(add_sub_request(model))
    expected = np.arange(16, dtype=np.float32).reshape(1, 16) + 1
    np.testing.assert_array_equal(response.outputs[0].data, expected)
    return response.model_version


# -- version policies ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "served"),
    [
        ({"latest": {"num_versions": 2}}, ["2", "3"]),
        ({"all": {}}, ["1", "2", "3"]),
        ({"specific": {"versions": [1, 3]}}, ["1", "3"]),
        ({}, ["3"]),
    ],
)
async def test_version_policy(tmp_path: Path, policy: dict[str, Any], served: list[str]) -> None:
    extra = {"version_policy": policy} if policy else {}
    add_model(tmp_path, versions=(1, 2, 3), **extra)
    async with running(tmp_path) as engine:
        assert engine.model_metadata("add_sub")["versions"] == served
        assert await served_version(engine) == served[-1]  # unversioned: the highest
        for version in served:
            response = await engine.infer(add_sub_request(version=version))
            assert response.model_version == version
        with pytest.raises(ModelNotFoundError, match="served versions: " + ", ".join(served)):
            await engine.infer(add_sub_request(version="7"))


# -- control modes ------------------------------------------------------------------------------
async def test_none_mode_refuses_model_control_naming_the_flag(tmp_path: Path) -> None:
    add_model(tmp_path)
    async with running(tmp_path) as engine:
        for call in (engine.load_model, engine.unload_model):
            with pytest.raises(ModelControlDisabledError, match="--model-control-mode explicit"):
                await call("add_sub", {})
        assert await served_version(engine) == "1"


async def test_explicit_mode_loads_only_what_it_is_asked(tmp_path: Path) -> None:
    add_model(tmp_path, "a")
    add_model(tmp_path, "b")
    add_model(tmp_path, "c")
    async with running(tmp_path, model_control_mode="explicit", load_model=("b",)) as engine:
        assert index(engine) == {
            ("a", ""): ("UNAVAILABLE", "not loaded"),
            ("b", "1"): ("READY", ""),
            ("c", ""): ("UNAVAILABLE", "not loaded"),
        }
        with pytest.raises(ModelNotReadyError, match="'a' is UNAVAILABLE: not loaded"):
            await engine.infer(add_sub_request("a"))
        await engine.load_model("a", {})
        assert await served_version(engine, "a") == "1"
        await engine.unload_model("b", {"unload_dependents": True})
        assert index(engine)[("b", "")] == ("UNAVAILABLE", "unloaded")
        with pytest.raises(ModelNotReadyError, match="'b' is UNAVAILABLE: unloaded"):
            await engine.infer(add_sub_request("b"))
    async with running(tmp_path, model_control_mode="explicit", load_model=("*",)) as engine:
        assert all(state == "READY" for state, _ in index(engine).values())


async def test_poll_mode_follows_the_repository(tmp_path: Path) -> None:
    add_model(tmp_path, "a")
    settings = {"model_control_mode": "poll", "repository_poll_secs": 0.05}
    async with running(tmp_path, **settings) as engine:
        add_version(tmp_path, 2, "a")  # latest 1: version 2 replaces 1
        await eventually(lambda: ("a", "2") in index(engine), what="version 2 served")
        assert ("a", "1") not in index(engine)
        add_model(tmp_path, "b")
        await eventually(lambda: index(engine).get(("b", "1")) == ("READY", ""), what="new b")
        assert await served_version(engine, "b") == "1"
        remove_version(tmp_path, 2, "a")  # back to version 1
        await eventually(lambda: ("a", "1") in index(engine), what="version 1 again")
        assert await served_version(engine, "a") == "1"
        shutil.rmtree(tmp_path / "b")
        await eventually(lambda: ("b", "") not in index(engine) and ("b", "1") not in index(engine))


# -- hot reload ---------------------------------------------------------------------------------
async def test_reload_loads_beside_and_a_failing_version_leaves_the_old_serving(
    tmp_path: Path,
) -> None:
    add_model(tmp_path, version_policy={"all": {}})
    async with running(tmp_path, model_control_mode="explicit", load_model=("*",)) as engine:
        v1 = engine.registry.entry("add_sub").versions[1]
        add_version(tmp_path, 2)
        await engine.load_model("add_sub", {})
        versions = engine.registry.entry("add_sub").versions
        assert versions[1] is v1  # unchanged versions are not reloaded
        assert await served_version(engine) == "2"

        break_version(tmp_path, 3)
        with pytest.raises(
            ModelLoadError, match=r"load failed for model 'add_sub': .*3/model.onnx"
        ):
            await engine.load_model("add_sub", {})
        rows = index(engine)
        assert rows[("add_sub", "2")][0] == "READY"
        assert "the previous version(s) go on serving" in rows[("add_sub", "2")][1]
        assert await served_version(engine) == "2"

        remove_version(tmp_path, 3)
        break_version(tmp_path, 1)  # an older version breaks: nothing changes at all
        with pytest.raises(ModelLoadError, match=r"version 1: .*INVALID_PROTOBUF"):
            await engine.load_model("add_sub", {})
        assert engine.registry.entry("add_sub").versions[1] is v1
        assert "version 1: " in index(engine)[("add_sub", "1")][1]
        add_version(tmp_path, 1)
        await engine.load_model("add_sub", {})
        v1 = engine.registry.entry("add_sub").versions[1]
        add_version(tmp_path, 2)  # rewritten: version 2 is replaced, version 1 kept
        old = engine.registry.entry("add_sub").versions[2]
        await engine.load_model("add_sub", {})
        new = engine.registry.entry("add_sub").versions
        assert new[2] is not old and new[1] is v1
        assert old.in_flight == 0 and old.instances[0].closed
        assert index(engine)[("add_sub", "2")] == ("READY", "")


async def test_config_override_reloads_every_version(tmp_path: Path) -> None:
    add_model(tmp_path)
    async with running(tmp_path, model_control_mode="explicit", load_model=("*",)) as engine:
        old = engine.registry.entry("add_sub").versions[1]
        override = add_sub_config(tmp_path, max_batch_size=2)
        await engine.load_model("add_sub", {"config": orjson.dumps(override).decode()})
        assert engine.registry.entry("add_sub").versions[1] is not old
        assert engine.model_config("add_sub").max_batch_size == 2
        with pytest.raises(InvalidInputError, match="max_batch_size 2"):
            await engine.infer(add_sub_request(rows=3))


@pytest.mark.parametrize(
    ("parameters", "error", "message"),
    [
        ({"config": "{not json"}, InvalidInputError, "'config' is not valid JSON"),
        ({"config": "[1]"}, InvalidInputError, "must be a JSON object"),
        ({"config": 5}, InvalidInputError, "must be a string holding a JSON"),
        ({"config": '{"max_batch_size": -1}'}, ConfigError, "max_batch_size"),
        ({"config": '{"name": "other"}'}, ConfigError, "its folder is 'add_sub'"),
        ({"file:1/model.onnx": b"x"}, InvalidInputError, "'config' is required with file"),
        ({"file:1/../x": b"x"}, InvalidInputError, "must stay inside the model folder"),
        ({"colour": "red"}, InvalidInputError, "unknown load parameter 'colour'"),
        ({"pinned": "yes"}, InvalidInputError, "'pinned' must be true or false"),
    ],
)
async def test_load_error_paths(
    tmp_path: Path, parameters: dict[str, Any], error: type[Exception], message: str
) -> None:
    add_model(tmp_path)
    async with running(tmp_path, model_control_mode="explicit", load_model=("*",)) as engine:
        with pytest.raises(error, match=message) as refused:
            await engine.load_model("add_sub", parameters)
        # Triton's words first: its model-control clients look for "failed to load"
        assert str(refused.value).startswith("failed to load 'add_sub': ")
        assert await served_version(engine) == "1"


async def test_unknown_and_broken_models(tmp_path: Path) -> None:
    add_model(tmp_path)
    break_version(tmp_path, 1, "broken")
    async with running(tmp_path, model_control_mode="explicit") as engine:
        with pytest.raises(
            ModelNotFoundError,
            match="failed to load 'nope', failed to poll from model repository: 'nope' is not in",
        ):
            await engine.load_model("nope", {})
        with pytest.raises(InvalidInputError, match="may not hold '/'"):
            await engine.load_model("../etc", {})
        with pytest.raises(
            ModelNotFoundError, match="Request for unknown model: 'nope' is not found"
        ):
            await engine.unload_model("nope", {})
        with pytest.raises(ModelLoadError, match="load failed for model 'broken'"):
            await engine.load_model("broken", {})
        state, reason = index(engine)[("broken", "")]
        assert state == "UNAVAILABLE" and reason
        # recorded although the read failed: poll mode tries it again only when it changes
        assert engine.lifecycle.records.record("broken").fingerprint == fingerprint(
            tmp_path / "broken"
        )


# -- warm-up ------------------------------------------------------------------------------------
async def test_warmup_runs_before_ready(tmp_path: Path) -> None:
    (tmp_path / "add_sub" / "warmup").mkdir(parents=True)
    (tmp_path / "add_sub" / "warmup" / "ones").write_bytes(np.ones(32, "<f4").tobytes())
    warmup = [
        {
            "name": "zeros",
            "batch_size": 2,
            "count": 3,
            # Triton's map syntax in config.pbtxt: inputs [ { key: .. value: { .. } } ]
            "inputs": [
                {
                    "key": "INPUT0",
                    "value": {"data_type": "TYPE_FP32", "dims": [16], "zero_data": True},
                },
                {
                    "key": "INPUT1",
                    "value": {"data_type": "TYPE_FP32", "dims": [16], "input_data_file": "ones"},
                },
            ],
        }
    ]
    add_model(tmp_path, model_warmup=warmup)
    async with running(tmp_path) as engine:
        (stats,) = engine.model_statistics("add_sub")
        assert stats["inference_stats"]["success"]["count"] == 3
        assert stats["inference_count"] == 6
        config = engine.model_config("add_sub").to_triton_dict()
        assert config["model_warmup"][0]["inputs"]["INPUT1"]["input_data_file"] == "ones"


async def test_failing_warmup_fails_the_load(tmp_path: Path) -> None:
    warmup = [
        {
            "name": "bad",
            "batch_size": 1,
            "inputs": [
                {
                    "key": "INPUT0",
                    "value": {"data_type": "TYPE_FP32", "dims": [16], "random_data": True},
                }
            ],
        }
    ]
    add_model(tmp_path, model_warmup=warmup)
    async with running(tmp_path) as engine:
        state, reason = index(engine)[("add_sub", "1")]  # the version that failed
        assert state == "UNAVAILABLE"
        assert "warm-up sample 'bad' failed" in reason and "INPUT1" in reason


# -- runtime management -------------------------------------------------------------------------
async def test_instance_count_changes_under_traffic(tmp_path: Path) -> None:
    add_model(tmp_path)
    async with running(tmp_path) as engine:
        served = engine.registry.entry("add_sub").versions[1]
        stop = asyncio.Event()

        async def client() -> int:
            sent = 0
            while not stop.is_set():
                assert await served_version(engine) == "1"
                sent += 1
            return sent

        clients = [asyncio.create_task(client()) for _ in range(4)]
        await engine.set_instance_count("add_sub", 3)
        assert len(served.instances) == 3
        await engine.set_instance_count("add_sub", 1)
        assert len(served.instances) == 1
        stop.set()
        assert all(n > 0 for n in await asyncio.gather(*clients))
        assert engine.registry.entry("add_sub").versions[1] is served  # no reload
        for bad in (0, "2", True):
            with pytest.raises(InvalidInputError, match="'count' must be an integer from 1 to 64"):
                await engine.set_instance_count("add_sub", bad)
        with pytest.raises(ConfigError, match=r"above the limit of 64 \(--max-model-instances"):
            await engine.set_instance_count("add_sub", 65)


async def test_default_version(tmp_path: Path) -> None:
    add_model(tmp_path, versions=(1, 2), version_policy={"all": {}})
    async with running(tmp_path) as engine:
        engine.set_default_version("add_sub", "1")
        assert await served_version(engine) == "1"
        engine.set_default_version("add_sub", "")
        assert await served_version(engine) == "2"
        with pytest.raises(InvalidInputError, match="does not serve version '5'"):
            engine.set_default_version("add_sub", "5")
        with pytest.raises(InvalidInputError, match="must be a string"):
            engine.set_default_version("add_sub", 1)
        with pytest.raises(ModelNotFoundError):
            engine.set_default_version("nope", "1")


# -- on demand and idle -------------------------------------------------------------------------
async def test_load_on_demand_and_idle_unload(tmp_path: Path) -> None:
    add_model(tmp_path)
    settings = {
        "model_control_mode": "explicit",
        "load_on_demand": True,
        "idle_unload_secs": 0.2,
    }
    async with running(tmp_path, **settings) as engine:
        assert index(engine)[("add_sub", "")][0] == "UNAVAILABLE"
        results = await asyncio.gather(*(served_version(engine) for _ in range(5)))
        assert results == ["1"] * 5
        await eventually(
            lambda: (
                index(engine).get(("add_sub", "")) == ("UNAVAILABLE", "unloaded after 0.2 s idle")
            ),
            what="idle unload",
        )
        assert await served_version(engine) == "1"  # loads again
        with pytest.raises(
            ModelNotFoundError, match="Request for unknown model: 'nope' is not found"
        ):
            await engine.infer(add_sub_request("nope"))
        add_model(tmp_path, "late")  # appears on disk after start: found on demand
        assert await served_version(engine, "late") == "1"
        break_version(tmp_path, 1, "broken")
        with pytest.raises(ModelNotReadyError, match="could not be loaded on demand"):
            await engine.infer(add_sub_request("broken"))


def slow_with_warmup(repo: Path, seconds: float) -> None:
    """The model "slow" with one warm-up run: its load takes as long as one run."""
    path = modelgen.slow(repo, seconds=seconds)
    config = modelgen.model_config(path, max_batch_size=8)
    config["model_warmup"] = [
        {
            "name": "one",
            "batch_size": 1,
            "inputs": [
                {
                    "key": "INPUT0",
                    "value": {"data_type": "TYPE_FP32", "dims": [1], "zero_data": True},
                }
            ],
        }
    ]
    write_config(repo / "slow", config)


async def test_on_demand_wait_is_bounded_and_the_index_shows_loading(tmp_path: Path) -> None:
    slow_with_warmup(tmp_path, 0.5)
    settings = {
        "model_control_mode": "explicit",
        "load_on_demand": True,
        "load_on_demand_timeout_secs": 0.05,
    }
    data = np.zeros((1, 1), dtype=np.float32)
    request = InferenceRequest("slow", [Tensor("INPUT0", "FP32", data.shape, data)])
    async with running(tmp_path, **settings) as engine:
        with pytest.raises(ModelNotReadyError, match=r"still loading after 0.05 s"):
            await engine.infer(request)
        assert index(engine)[("slow", "")] == ("LOADING", "")
        await eventually(lambda: index(engine).get(("slow", "1")) == ("READY", ""))
        response = await engine.infer(request)
        assert response.model_version == "1"


async def test_a_cancelled_first_load_leaves_the_model_unavailable_and_loadable(
    tmp_path: Path,
) -> None:
    """A load whose caller is cancelled mid-way (here in its warm-up) does not leave the
    model LOADING for good: it is UNAVAILABLE saying why, and the next load loads it."""
    slow_with_warmup(tmp_path, 0.3)
    async with running(tmp_path, model_control_mode="explicit") as engine:
        load = asyncio.get_running_loop().create_task(engine.load_model("slow", {}))
        await eventually(lambda: index(engine)[("slow", "")] == ("LOADING", ""))
        load.cancel()
        with pytest.raises(asyncio.CancelledError):
            await load
        assert index(engine)[("slow", "")] == ("UNAVAILABLE", "the load was cancelled")
        await engine.load_model("slow", {})
        assert index(engine)[("slow", "1")] == ("READY", "")


# -- pacing -------------------------------------------------------------------------------------
async def test_loads_beside_busy_serving_pause_and_loads_requests_wait_for_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload through the API pauses after its steps while a request is in flight, not on
    an idle server; an on-demand load (a request waits for it) never pauses."""
    add_model(tmp_path)
    add_model(tmp_path, "other")
    path = modelgen.slow(tmp_path, seconds=1.0)
    write_config(tmp_path / "slow", modelgen.model_config(path, max_batch_size=8))
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded_sleep(seconds: float) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(pacing, "sleep", recorded_sleep)
    settings = {"model_control_mode": "explicit", "load_model": ["add_sub", "slow"]}
    smaller = {"config": orjson.dumps(add_sub_config(tmp_path, max_batch_size=4)).decode()}
    async with running(tmp_path, load_on_demand=True, **settings) as engine:
        await engine.load_model("add_sub", smaller)
        assert pauses == []  # nothing served meanwhile
        data = np.zeros((1, 1), dtype=np.float32)
        busy = asyncio.create_task(
            engine.infer(InferenceRequest("slow", [Tensor("INPUT0", "FP32", data.shape, data)]))
        )
        assert engine.dispatcher is not None
        await eventually(engine.dispatcher.busy, what="a request in flight")
        await engine.load_model("add_sub", {})  # the file's config again: a new instance
        # waits before creating the instance (for the read) and before its warm-up (for the
        # creation); the warm-up (none) calls for next to no wait before the freeing
        assert len(pauses) >= 2 and all(p > 0 for p in pauses), pauses
        paced = len(pauses)
        assert await served_version(engine, "other") == "1"  # on demand: not paced
        assert len(pauses) == paced
        assert not busy.done()
        await busy
