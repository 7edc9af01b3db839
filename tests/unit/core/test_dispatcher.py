"""The dispatcher with fake backends: which model's batch runs next when they share slots."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from inferplex.backends.base import Backend
from inferplex.config import ModelConfig
from inferplex.core.caller import EngineCaller
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Scheduler
from inferplex.types import InferenceRequest, Tensor


class GatedBackend(Backend):
    """Runs a batch only when the test opens the gate; records what ran."""

    def __init__(self, name: str, log: list[str], gate: threading.Semaphore) -> None:
        self._name, self._log, self._gate = name, log, gate

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self._gate.acquire()
        self._log.append(f"{self._name}:{len(inputs['x'])}")
        return {"y": inputs["x"] * 2}


def config(name: str, weight: float = 1.0, batching: bool = True) -> ModelConfig:
    return ModelConfig(
        name=name,
        max_batch_size=8,
        input=[{"name": "x", "data_type": "FP32", "dims": [1]}],
        output=[{"name": "y", "data_type": "FP32", "dims": [1]}],
        dynamic_batching={} if batching else None,
        scheduling={"weight": weight},
    )


def request(model: str, value: float) -> InferenceRequest:
    x = np.array([[value]], dtype=np.float32)
    return InferenceRequest(model, [Tensor("x", "FP32", x.shape, x)])


async def settle() -> None:
    """Let every ready task and callback on the loop run (queued requests reach the queue)."""
    for _ in range(10):
        await asyncio.sleep(0)


class Rig:
    def __init__(self, policy: str, slots: int, models: list[ModelConfig]) -> None:
        loop = asyncio.get_running_loop()
        self.log: list[str] = []
        self.gate = threading.Semaphore(0)
        self.dispatcher = Dispatcher(Scheduler(policy, slots), loop)  # type: ignore[arg-type]
        self.versions: dict[str, ModelVersion] = {}
        for cfg in models:
            backend = GatedBackend(cfg.name, self.log, self.gate)
            version = ModelVersion(cfg, 1, [backend], loop, self.dispatcher)
            self.dispatcher.add(version.queueing, scheduling_policy(cfg))
            self.versions[cfg.name] = version

    def infer(self, model: str, value: float) -> asyncio.Task:
        return asyncio.create_task(self.versions[model].infer(request(model, value)))

    async def wait_running(self, count: int) -> None:
        for _ in range(2000):
            if sum(len(v.instances) - len(v.idle) for v in self.versions.values()) == count:
                return
            await asyncio.sleep(0.001)
        raise AssertionError(f"expected {count} batches running")

    def close(self) -> None:
        for _ in range(100):
            self.gate.release()
        for version in self.versions.values():
            version.close()


@pytest.fixture
def make_rig():
    rigs: list[Rig] = []

    def make(policy: str, slots: int, models: list[ModelConfig]) -> Rig:
        rigs.append(Rig(policy, slots, models))
        return rigs[-1]

    yield make
    for rig in rigs:
        rig.close()


async def test_queued_requests_batch_while_the_instance_is_busy(make_rig) -> None:
    rig = make_rig("priority", 1, [config("a")])
    first = rig.infer("a", 1)
    await rig.wait_running(1)
    rest = [rig.infer("a", v) for v in (2, 3, 4)]
    await settle()
    rig.gate.release()
    rig.gate.release()
    outputs = await asyncio.gather(first, *rest)
    assert rig.log == ["a:1", "a:3"]  # the three queued requests ran as one batch
    assert [o.outputs[0].data.item() for o in outputs] == [2, 4, 6, 8]


async def test_priority_runs_the_heavier_model_first_on_one_slot(make_rig) -> None:
    rig = make_rig("priority", 1, [config("low", 1), config("high", 8)])
    busy = rig.infer("low", 0)
    await rig.wait_running(1)
    waiting = [rig.infer("low", 1), rig.infer("high", 1)]
    await settle()
    for _ in range(3):
        rig.gate.release()
    await asyncio.gather(busy, *waiting)
    assert rig.log == ["low:1", "high:1", "low:1"]


async def test_round_robin_alternates(make_rig) -> None:
    rig = make_rig("round_robin", 1, [config("a", batching=False), config("b", batching=False)])
    busy = rig.infer("a", 0)
    await rig.wait_running(1)
    waiting = [rig.infer(m, 1) for m in ("a", "a", "b", "b")]
    await settle()
    for _ in range(5):
        rig.gate.release()
    await asyncio.gather(busy, *waiting)
    assert rig.log == ["a:1", "b:1", "a:1", "b:1", "a:1"]


async def test_slots_bound_concurrent_batches_across_models(make_rig) -> None:
    rig = make_rig("round_robin", 2, [config("a"), config("b"), config("c")])
    tasks = [rig.infer(m, 1) for m in ("a", "b", "c")]
    await rig.wait_running(2)
    await settle()
    assert rig.dispatcher.scheduler.running == 2
    for _ in range(3):
        rig.gate.release()
    await asyncio.gather(*tasks)
    assert sorted(rig.log) == ["a:1", "b:1", "c:1"]


async def pipeline_steps(rig: Rig, steps: dict[str, int]) -> list[asyncio.Future]:
    """Submit one request per model the way an ensemble does (EngineCaller, from a worker
    thread), with the given step precedence (0: a plain request)."""
    loop = asyncio.get_running_loop()

    async def infer(request: InferenceRequest):
        return await rig.versions[request.model_name].infer(request)

    caller = EngineCaller(infer, loop)
    futures = await asyncio.to_thread(
        lambda: [caller.submit(request(m, 1), p) for m, p in steps.items()]
    )
    return [asyncio.wrap_future(f) for f in futures]


@pytest.mark.parametrize(
    ("steps", "order"),
    [
        # the scheduler alone would start "a" (tie, key order): the longer chain goes first
        ({"a": 1, "b": 2}, ["z:1", "b:1", "a:1"]),
        ({"a": 1, "b": 1}, ["z:1", "a:1", "b:1"]),
        # a plain request the scheduler picked keeps its slot: precedence orders steps only
        ({"a": 0, "b": 2}, ["z:1", "a:1", "b:1"]),
    ],
)
async def test_the_pipeline_step_with_the_longest_chain_starts_first(
    make_rig, steps: dict[str, int], order: list[str]
) -> None:
    rig = make_rig("priority", 1, [config("a"), config("b"), config("z")])
    busy = rig.infer("z", 1)
    await rig.wait_running(1)
    waiting = await pipeline_steps(rig, steps)
    await settle()
    for _ in range(3):
        rig.gate.release()
    await asyncio.gather(busy, *waiting)
    assert rig.log == order
    assert all(v.precedence == 0 for v in rig.versions.values())  # nothing queued any more


async def test_a_step_swaps_in_only_where_the_scheduler_could_have_picked_it(make_rig) -> None:
    # "b" holds rate-limiter tokens: the dispatcher leaves those decisions to the scheduler
    limited = ModelConfig.model_validate(
        {
            **config("b").model_dump(exclude_unset=True),
            "instance_group": [
                {"count": 1, "rate_limiter": {"resources": [{"name": "r", "count": 1}]}}
            ],
        }
    )
    rig = make_rig("priority", 1, [config("a"), limited, config("z")])
    busy = rig.infer("z", 1)
    await rig.wait_running(1)
    waiting = await pipeline_steps(rig, {"a": 1, "b": 2})
    await settle()
    for _ in range(3):
        rig.gate.release()
    await asyncio.gather(busy, *waiting)
    assert rig.log == ["z:1", "a:1", "b:1"]
