"""Backends that see the requests of a batch (``per_request``, the Python backend): each
request gets its own outputs, and one may fail without failing the others."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from inferplex.backends.base import Backend, BatchRequest, RequestOutcome
from inferplex.config import ModelConfig
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Scheduler
from inferplex.errors import InvalidInputError
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

TIMEOUT = 30


class PerRequestBackend(Backend):
    """y = x * the request's 'scale' parameter; a request with 'fail' fails alone. The first
    batch waits for ``gate``, so the requests sent meanwhile queue up into one batch."""

    per_request = True

    def __init__(self) -> None:
        self.started = threading.Event()
        self.gate = threading.Event()
        self.batches: list[list[BatchRequest]] = []

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        raise AssertionError("a per-request backend gets execute_requests")

    def execute_requests(
        self, inputs: dict[str, np.ndarray], outputs: list[str], requests: list[BatchRequest]
    ) -> list[RequestOutcome]:
        self.started.set()
        assert self.gate.wait(TIMEOUT)
        self.batches.append(requests)
        answers: list[RequestOutcome] = []
        offset = 0
        for request in requests:
            rows = inputs["x"][offset : offset + request.rows]
            offset += request.rows
            if request.parameters.get("fail"):
                answers.append(InvalidInputError(f"request {request.id} asked to fail"))
            else:
                scale = request.parameters.get("scale", 1)
                answers.append({"y": rows * scale, "z": rows + 100})
        return answers


def config() -> ModelConfig:
    return ModelConfig(
        name="m",
        max_batch_size=8,
        input=[{"name": "x", "data_type": "FP32", "dims": [1]}],
        output=[
            {"name": "y", "data_type": "FP32", "dims": [1]},
            {"name": "z", "data_type": "FP32", "dims": [1]},
        ],
        dynamic_batching={},
    )


def request(request_id: str, value: float, rows: int = 1, **parameters: Any) -> InferenceRequest:
    x = np.full((rows, 1), value, dtype=np.float32)
    return InferenceRequest(
        "m",
        [Tensor("x", "FP32", x.shape, x)],
        id=request_id,
        parameters=parameters,
        outputs=[RequestedOutput("y")],
    )


async def test_each_request_of_a_batch_is_answered_or_failed_alone() -> None:
    loop = asyncio.get_running_loop()
    backend = PerRequestBackend()
    dispatcher = Dispatcher(Scheduler("priority", 2), loop, 0.0)
    version = ModelVersion(config(), 1, [backend], loop, dispatcher)
    dispatcher.add(version.queueing, scheduling_policy(config()))
    first = asyncio.ensure_future(version.infer(request("a", 1.0)))
    assert await asyncio.to_thread(backend.started.wait, TIMEOUT)
    queued = [
        asyncio.ensure_future(version.infer(r))
        for r in (
            request("b", 2.0, rows=2, scale=10),
            request("c", 3.0, fail=True),
            request("d", 4.0),
        )
    ]
    while version.queue.pending_requests < 3:  # they queue behind the running batch
        await asyncio.sleep(0.001)
    backend.gate.set()
    results = await asyncio.gather(first, *queued, return_exceptions=True)
    assert [[r.id for r in batch] for batch in backend.batches] == [["a"], ["b", "c", "d"]]
    assert [r.rows for r in backend.batches[1]] == [2, 1, 1]
    a, b, c, d = results
    assert not isinstance(a, BaseException) and a.outputs[0].data.tolist() == [[1.0]]
    assert not isinstance(b, BaseException) and b.outputs[0].data.tolist() == [[20.0], [20.0]]
    assert [t.name for t in b.outputs] == ["y"]  # only what it asked for
    assert isinstance(c, InvalidInputError) and c.message == "request c asked to fail"
    assert not isinstance(d, BaseException) and d.outputs[0].data.tolist() == [[4.0]]
    assert b.id == "b" and d.id == "d"
