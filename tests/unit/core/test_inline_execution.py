"""Batches measured to be cheaper than the hand-over to an instance's thread run on the loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

from inferplex.backends.base import Backend
from inferplex.config import ModelConfig
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Scheduler
from inferplex.errors import ModelExecutionError
from inferplex.types import InferenceRequest, Tensor

LIMIT_S = 0.005  # generous: a test machine may be slow, the decision is what is tested


class ThreadRecordingBackend(Backend):
    """Doubles ``x``; records the thread each batch ran on; fails on a negative input."""

    def __init__(self, runs_inline: bool = True) -> None:
        self.runs_inline = runs_inline
        self.threads: list[int] = []

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        self.threads.append(threading.get_ident())
        if (inputs["x"] < 0).any():
            raise ValueError("negative input")
        return {"y": inputs["x"] * 2}


def config(dims: list[int] | None = None, **scheduling: Any) -> ModelConfig:
    return ModelConfig(
        name="m",
        max_batch_size=8,
        input=[{"name": "x", "data_type": "FP32", "dims": dims or [1]}],
        output=[{"name": "y", "data_type": "FP32", "dims": dims or [1]}],
        dynamic_batching={},
        scheduling=scheduling,
    )


def serve(cfg: ModelConfig, backend: Backend, limit_s: float = LIMIT_S) -> ModelVersion:
    loop = asyncio.get_running_loop()
    dispatcher = Dispatcher(Scheduler("priority", 2), loop, limit_s)
    version = ModelVersion(cfg, 1, [backend], loop, dispatcher)
    dispatcher.add(version.queueing, scheduling_policy(cfg))
    return version


async def infer(version: ModelVersion, value: float) -> float:
    x = np.array([[value]], dtype=np.float32)
    response = await version.infer(InferenceRequest("m", [Tensor("x", "FP32", x.shape, x)]))
    (y,) = response.outputs
    return float(np.asarray(y.data).reshape(-1)[0])


async def run_three(version: ModelVersion) -> list[float]:
    try:
        return [await infer(version, value) for value in (1.0, 2.0, 3.0)]
    finally:
        await asyncio.to_thread(version.close)


async def test_a_cheap_batch_runs_on_the_loop_once_measured() -> None:
    backend = ThreadRecordingBackend()
    version = serve(config(), backend)
    assert await run_three(version) == [2.0, 4.0, 6.0]
    loop_thread = threading.get_ident()
    # the first batch has no measurement yet: it goes to the instance's thread
    assert backend.threads[0] != loop_thread
    assert backend.threads[1:] == [loop_thread, loop_thread]
    assert version.stats.to_dict()["inference_count"] == 3


@pytest.mark.parametrize(
    ("cfg", "backend", "limit_s"),
    [
        (config(), ThreadRecordingBackend(runs_inline=False), LIMIT_S),
        (config(), ThreadRecordingBackend(), 0.0),
        (config(nice=5), ThreadRecordingBackend(), LIMIT_S),
        (config(dims=[-1]), ThreadRecordingBackend(), LIMIT_S),
    ],
    ids=["backend-cannot", "limit-0", "niced-model", "variable-shape"],
)
async def test_batches_stay_in_the_instance_thread(
    cfg: ModelConfig, backend: ThreadRecordingBackend, limit_s: float
) -> None:
    version = serve(cfg, backend, limit_s)
    assert await run_three(version) == [2.0, 4.0, 6.0]
    assert threading.get_ident() not in backend.threads


async def test_a_batch_measured_slower_than_the_limit_stays_in_the_thread() -> None:
    backend = ThreadRecordingBackend()
    version = serve(config(), backend)
    for _ in range(2):  # as if the model had taken 50 ms a batch, past its first run
        version.estimator.observe(1, 0.05)
    await run_three(version)
    assert threading.get_ident() not in backend.threads


async def test_a_failure_on_the_loop_answers_the_request_and_frees_the_instance() -> None:
    backend = ThreadRecordingBackend()
    version = serve(config(), backend)
    try:
        assert await infer(version, 1.0) == 2.0
        with pytest.raises(ModelExecutionError, match="negative input"):
            await infer(version, -1.0)
        assert backend.threads[-1] == threading.get_ident()
        assert await infer(version, 5.0) == 10.0
        assert version.idle == version.instances
    finally:
        await asyncio.to_thread(version.close)
