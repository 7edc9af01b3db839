"""Deadlines: one timer for many request timeouts."""

from __future__ import annotations

import asyncio

import pytest

from inferplex.resilience.deadlines import Deadlines


class Expired(Exception):
    pass


async def waits(deadlines: Deadlines, timeout_s: float, answer: asyncio.Future[int]) -> int:
    """What a guard does: wait for an answer under a deadline."""
    entry = deadlines.start(timeout_s)
    try:
        return await answer
    except asyncio.CancelledError:
        if not deadlines.expired(entry):
            raise
        raise Expired from None
    finally:
        deadlines.finish(entry)


async def test_a_late_answer_expires_and_an_early_one_does_not() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    late: asyncio.Future[int] = loop.create_future()
    early: asyncio.Future[int] = loop.create_future()
    slow = asyncio.create_task(waits(deadlines, 0.02, late))
    fast = asyncio.create_task(waits(deadlines, 0.02, early))
    await asyncio.sleep(0)
    early.set_result(1)
    assert await fast == 1
    with pytest.raises(Expired):
        await slow
    assert slow.cancelling() == 0  # the timeout's cancellation was withdrawn


async def test_a_shorter_deadline_behind_longer_ones_fires_first() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    never: asyncio.Future[int] = loop.create_future()
    long = asyncio.create_task(waits(deadlines, 60.0, never))
    short = asyncio.create_task(waits(deadlines, 0.01, loop.create_future()))
    with pytest.raises(Expired):
        await short
    assert not long.done()
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long  # a cancellation from elsewhere is not a timeout


async def test_many_requests_share_few_timers_and_finished_ones_are_dropped() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(loop)
    for i in range(5000):
        answer: asyncio.Future[int] = loop.create_future()
        answer.set_result(i)
        assert await waits(deadlines, 30.0, answer) == i
    assert deadlines.armed == 1
    assert len(deadlines) <= 1024 + 1  # compacted, not 5000 finished entries
