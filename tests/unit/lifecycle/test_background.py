"""BackgroundWork: load work in threads below the server's priority."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from inferplex.lifecycle.background import BackgroundWork

linux = pytest.mark.skipif(sys.platform != "linux", reason="per-thread nice is Linux's")


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


async def test_runs_the_call_in_another_thread_and_returns_its_result() -> None:
    work = BackgroundWork(0)
    try:
        name = await work.run(lambda: threading.current_thread().name)
        assert name.startswith("inferplex-load")
        assert await work.run(divmod, 7, 2) == (3, 1)
    finally:
        work.close()


async def test_the_call_s_exception_reaches_the_caller() -> None:
    work = BackgroundWork(0)
    try:
        with pytest.raises(ZeroDivisionError):
            await work.run(divmod, 1, 0)
    finally:
        work.close()


@linux
async def test_its_threads_run_below_the_caller_and_the_caller_keeps_its_priority() -> None:
    own = _nice()
    work = BackgroundWork(5)
    try:
        assert await work.run(_nice) == min(19, own + 5)
    finally:
        work.close()
    assert _nice() == own
    unchanged = BackgroundWork(0)
    try:
        assert await unchanged.run(_nice) == own
    finally:
        unchanged.close()


async def test_a_closed_executor_is_made_again_on_the_next_call() -> None:
    work = BackgroundWork(1)
    assert await work.run(len, "ab") == 2
    work.close()
    assert await work.run(len, "abc") == 3
    work.close()


@pytest.mark.parametrize("nice", [-1, 20])
def test_a_nice_value_outside_0_to_19_is_refused(nice: int) -> None:
    with pytest.raises(ValueError, match="nice must be 0 to 19"):
        BackgroundWork(nice)
