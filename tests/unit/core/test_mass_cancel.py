"""Mass cancellation does a bounded amount of work per turn of the event loop: tasks are
cancelled a slice per turn (core/cancelling.py), and a model's queue is swept of cancelled
requests once they are a share of it, not once per turn (core/model.py)."""

from __future__ import annotations

import asyncio

from inferplex.core.cancelling import SLICE, cancel_in_slices
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import SWEEP_SHARE, ModelVersion
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Scheduler
from tests.unit.core.test_per_request import PerRequestBackend, config, request


async def test_tasks_are_cancelled_a_slice_per_turn_of_the_loop() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    tasks = [asyncio.ensure_future(asyncio.shield(never)) for _ in range(10 * SLICE + 3)]
    await asyncio.sleep(0)  # all started, all waiting
    cancel_in_slices(tasks)
    done, turns = 0, 0
    while done < len(tasks):
        await asyncio.sleep(0)
        turns += 1
        now = sum(task.done() for task in tasks)
        assert now - done <= SLICE  # never more than a slice unwinds in one turn
        done = now
        assert turns < 100
    assert turns >= 10
    assert all(task.cancelled() for task in tasks)


async def test_the_queue_is_swept_once_its_cancelled_requests_are_a_share_of_it() -> None:
    loop = asyncio.get_running_loop()
    backend = PerRequestBackend()
    dispatcher = Dispatcher(Scheduler("priority", 1), loop, 0.0)
    version = ModelVersion(config(), 1, [backend], loop, dispatcher)
    dispatcher.add(version.queueing, scheduling_policy(config()))
    first = asyncio.ensure_future(version.infer(request("first", 1.0)))
    await asyncio.to_thread(backend.started.wait, 30)  # the instance is busy from here on
    queued = [asyncio.ensure_future(version.infer(request(f"r{i}", 1.0))) for i in range(800)]
    while version.queue.pending_requests < len(queued):
        await asyncio.sleep(0.001)
    sweeps = 0
    withdraw = version.queueing.withdraw

    def counted() -> None:
        nonlocal sweeps
        sweeps += 1
        withdraw()

    version.queueing.withdraw = counted  # type: ignore[method-assign]
    for task in queued[:400]:  # one cancelled request per turn: 400 turns
        task.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    # a sweep per 1/SWEEP_SHARE of the queue cancelled, not one per turn
    assert 1 <= sweeps <= SWEEP_SHARE
    assert version.queue.pending_requests <= 400 + len(queued) // SWEEP_SHARE
    backend.gate.set()
    await first
    answers = await asyncio.gather(*queued[400:])
    assert len(answers) == 400
    assert version.stats.cancelled == 400
