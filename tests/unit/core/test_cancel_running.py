"""A request whose caller goes away while its batch runs: a ``cancellable`` backend is told
which of the batch's requests it was, the batch's other requests are answered as usual, and
the cancelled one is counted and dropped without an answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

import numpy as np

from inferplex.backends.base import Backend, BatchRequest, Cancellation, RequestOutcome
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Scheduler
from tests.unit.core.test_per_request import TIMEOUT, config, request


class CancellableBackend(Backend):
    """Each batch waits until ``gate`` opens (a batch after the first: until one of its
    requests is cancelled); it records what it was told, per batch."""

    per_request = True
    cancellable = True

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.running = threading.Event()  # a batch after the first is running
        self.told: list[list[int]] = []
        self.batches: list[list[str]] = []

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        raise AssertionError("a per-request backend gets execute_requests")

    def execute_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: list[BatchRequest],
        cancellation: Cancellation | None = None,
    ) -> list[RequestOutcome]:
        assert cancellation is not None
        told: list[int] = []
        heard = threading.Event()

        def forward(indexes: Iterable[int]) -> None:  # on the event loop: never blocks
            told.extend(indexes)
            heard.set()

        cancellation.forward_to(forward)
        self.told.append(told)
        self.batches.append([r.id for r in requests])
        if len(self.batches) == 1:
            assert self.gate.wait(TIMEOUT)
        else:
            self.running.set()
            assert heard.wait(TIMEOUT)
        rows = [inputs["x"][i : i + 1] for i in range(len(requests))]  # one row each
        return [{"y": row, "z": row} for row in rows]


async def test_the_running_batch_is_told_and_its_other_requests_answered() -> None:
    loop = asyncio.get_running_loop()
    backend = CancellableBackend()
    dispatcher = Dispatcher(Scheduler("priority", 2), loop, 0.0)
    version = ModelVersion(config(), 1, [backend], loop, dispatcher)
    dispatcher.add(version.queueing, scheduling_policy(config()))
    first = asyncio.ensure_future(version.infer(request("a", 1.0)))
    while not backend.batches:
        await asyncio.sleep(0.001)
    kept = asyncio.ensure_future(version.infer(request("b", 2.0)))
    gone = asyncio.ensure_future(version.infer(request("c", 3.0)))
    while version.queue.pending_requests < 2:  # b and c queue behind the running batch
        await asyncio.sleep(0.001)
    backend.gate.set()
    assert (await first).outputs[0].data.tolist() == [[1.0]]
    assert await asyncio.to_thread(backend.running.wait, TIMEOUT)
    assert backend.batches[1] == ["b", "c"]
    gone.cancel()  # c's caller goes away while its batch runs
    answer = await kept  # the batch went on once told; b is answered
    assert answer.outputs[0].data.tolist() == [[2.0]]
    assert backend.told == [[], [1]]  # only c, by its place in the batch
    assert gone.cancelled()
    assert version.stats.cancelled == 1
    assert version.statistics()["cancelled_count"] == 1
    assert not version.execution._running  # nothing left to tell once the batch is done
