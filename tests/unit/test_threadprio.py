"""Per-thread nice values: lowering one thread's priority, and threads inheriting it."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

import pytest

from inferplex.threadprio import MAX_NICE, call_at_lower_priority, lower_thread_priority

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")

R = TypeVar("R")


def nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def in_thread(fn: Callable[[], R]) -> R:
    """``fn()`` in a fresh thread (so the test's own thread keeps its priority)."""
    result: list[R] = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    thread.join()
    return result[0]


def test_lowering_touches_only_the_calling_thread() -> None:
    own = nice_of_this_thread()

    def lowered() -> tuple[str | None, int]:
        return lower_thread_priority(3), nice_of_this_thread()

    reason, nice = in_thread(lowered)
    assert reason is None and nice == min(MAX_NICE, own + 3)
    assert nice_of_this_thread() == own


def test_lowering_stops_at_the_largest_nice_value() -> None:
    assert in_thread(lambda: (lower_thread_priority(50), nice_of_this_thread())) == (None, 19)


def test_negative_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="nice steps must be >= 0, got -1"):
        lower_thread_priority(-1)


def test_threads_made_by_the_call_inherit_its_priority_and_the_caller_keeps_its_own() -> None:
    own = nice_of_this_thread()
    # stands in for ONNX Runtime creating its intra-op pool while a session is made
    made, reason = call_at_lower_priority(4, lambda: in_thread(nice_of_this_thread))
    assert reason is None and made == min(MAX_NICE, own + 4)
    assert nice_of_this_thread() == own


def test_the_call_s_exception_reaches_the_caller() -> None:
    def fails() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        call_at_lower_priority(2, fails)


def test_zero_steps_run_in_the_caller() -> None:
    caller = threading.get_native_id()
    assert call_at_lower_priority(0, threading.get_native_id) == (caller, None)


async def test_a_model_instance_computes_at_the_model_s_nice_value() -> None:
    import asyncio

    from inferplex.core.instance import ModelInstance

    loop = asyncio.get_running_loop()
    answered: asyncio.Future[int] = loop.create_future()
    instance = ModelInstance(
        "m#0",
        backend=NoBackend(),  # type: ignore[arg-type]  # the work function ignores it
        loop=loop,
        work=lambda _backend, _job: nice_of_this_thread(),
        done=lambda _job, result, _error: answered.set_result(result),
        nice=5,
    )
    instance.run("job")
    assert await answered == min(MAX_NICE, nice_of_this_thread() + 5)
    await asyncio.to_thread(instance.close)


class NoBackend:
    def close(self) -> None:
        pass
