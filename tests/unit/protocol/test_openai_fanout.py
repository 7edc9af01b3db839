"""One OpenAI request as several calls through the data plane (protocol/openai/fanout.py):
the first call plans the rest, which start once it has; the calls are handed over once one
has answered (a stream's first response), not all; a failure releases what the others made;
a caller that goes away cancels them; the later calls join the first call's trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from inferplex.dataplane.codec import CallMeta
from inferplex.errors import InvalidInputError
from inferplex.protocol.openai.fanout import Plan, answers, later_meta, merged, start
from inferplex.tracing.context import CallTrace


class Calls:
    """Fake door calls: each records when it started and what was released."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.released: list[int] = []
        self.cancelled: list[int] = []
        self.answered: list[int] = []

    async def first(
        self, plan: Plan[int], count: int, fail: bool = False, until: asyncio.Event | None = None
    ) -> int:
        self.started.append(0)
        await asyncio.sleep(0)
        if fail:
            raise InvalidInputError("the body is bad")
        plan.make(count)  # decode: the plan is made, then the model is waited for
        await (until.wait() if until is not None else asyncio.sleep(0.01))
        self.answered.append(0)
        return 0

    async def later(self, index: int, delay: float = 0.0, fail: bool = False) -> int:
        self.started.append(index)
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancelled.append(index)
            raise
        if fail:
            raise InvalidInputError(f"call {index} failed")
        self.answered.append(index)
        return index

    def release(self, answer: int) -> None:
        self.released.append(answer)


async def test_the_rest_start_once_the_first_planned_them() -> None:
    calls, plan = Calls(), Plan[int]()

    def rest() -> list[Coroutine[Any, Any, int]]:
        assert calls.started == [0] and plan.value == 3  # planned before any other started
        return [calls.later(i) for i in range(1, plan.ready)]

    running = await start(calls.first(plan, 3), plan, rest, calls.release)
    assert await answers(running, calls.release) == [0, 1, 2]
    assert calls.released == []


async def test_the_calls_are_handed_over_once_one_answered() -> None:
    """Not once all did: two choices queued on one instance would wait on each other."""
    calls, plan, model = Calls(), Plan[int](), asyncio.Event()
    running = await start(calls.first(plan, 2, until=model), plan, lambda: [calls.later(1)])
    assert [call.done() for call in running] == [False, True]
    model.set()
    assert await answers(running) == [0, 1]


async def test_a_first_call_that_fails_before_planning_starts_no_other() -> None:
    calls, plan = Calls(), Plan[int]()
    with pytest.raises(InvalidInputError, match="the body is bad"):
        await start(calls.first(plan, 3, fail=True), plan, lambda: [calls.later(1)])
    assert calls.started == [0]


async def test_a_call_that_ends_first_in_error_is_the_answer() -> None:
    calls, plan = Calls(), Plan[int]()

    def rest() -> list[Coroutine[Any, Any, int]]:
        return [calls.later(1, fail=True), calls.later(2, delay=30)]

    with pytest.raises(InvalidInputError, match="call 1 failed"):
        await start(calls.first(plan, 3, until=asyncio.Event()), plan, rest, calls.release)
    await asyncio.sleep(0)
    assert calls.cancelled == [2]


async def test_a_failed_call_releases_the_others_answers() -> None:
    calls, plan = Calls(), Plan[int]()

    def rest() -> list[Coroutine[Any, Any, int]]:
        return [calls.later(1), calls.later(2, delay=0.01, fail=True), calls.later(3)]

    running = await start(calls.first(plan, 4), plan, rest, calls.release)
    with pytest.raises(InvalidInputError, match="call 2 failed"):
        await answers(running, calls.release)
    assert sorted(calls.released) == [0, 1, 3]


async def test_a_caller_that_goes_away_cancels_the_calls_and_releases_the_answers() -> None:
    calls, plan = Calls(), Plan[int]()

    def rest() -> list[Coroutine[Any, Any, int]]:
        return [calls.later(1), calls.later(2, delay=30)]

    async def call() -> list[int]:
        return await answers(await start(calls.first(plan, 3), plan, rest), calls.release)

    running = asyncio.ensure_future(call())
    while len(calls.answered) < 2:  # the first and call 1 answer; call 2 waits for its model
        await asyncio.sleep(0.001)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(0)
    assert calls.cancelled == [2] and sorted(calls.released) == [0, 1]


def test_later_calls_join_the_first_calls_trace() -> None:
    assert later_meta(CallMeta(model="m")).trace is None
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    first = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
    # the caller's parent: every call's
    given = CallMeta(trace=CallTrace({"traceparent": parent}, 5, first))
    found = later_meta(given).trace
    assert found is not None and found.carrier == {"traceparent": parent}
    assert found is not given.trace and found.received_ns == 5  # the answer names the first
    # none: the first call's span is the others' parent
    found = later_meta(CallMeta(trace=CallTrace({}, 5, first))).trace
    assert found is not None and found.carrier == {"traceparent": first}
    # the first call was not sampled: nor are the others
    assert later_meta(CallMeta(trace=CallTrace({}, 5, ""))).trace is None


async def test_merged_streams_interleave_as_their_items_come() -> None:
    queues: list[asyncio.Queue[str | None]] = [asyncio.Queue(), asyncio.Queue()]

    async def items(queue: asyncio.Queue[str | None]) -> AsyncIterator[str]:
        while (item := await queue.get()) is not None:
            yield item

    reader = merged([items(queues[0]), items(queues[1])])
    found = []
    for index, item in [(1, "b0"), (0, "a0"), (1, "b1"), (1, "b2"), (0, "a1")]:
        queues[index].put_nowait(item)
        found.append(await anext(reader))
    assert found == [(1, "b0"), (0, "a0"), (1, "b1"), (1, "b2"), (0, "a1")]
    for queue in queues:
        queue.put_nowait(None)
    assert [item async for item in reader] == []
    single = asyncio.Queue[str | None]()
    for item in ("c0", "c1", None):
        single.put_nowait(item)
    assert [item async for item in merged([items(single)])] == [(0, "c0"), (0, "c1")]
