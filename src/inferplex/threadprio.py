"""Per-thread CPU priority (Linux nice values) for the server's own threads.

Linux keeps a nice value per thread, and a thread inherits it from the thread that creates
it. Under CPU contention the kernel's fair scheduler gives a thread a share proportional to
a weight that falls about 1.25x per nice step, so threads 10 steps below the rest get under
a tenth of a contended core while an idle machine still gives them everything. Raising a
thread's nice value needs no privilege; lowering it again does, so every change here is
one-way for the thread it touches.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

R = TypeVar("R")

#: the largest nice value Linux has
MAX_NICE = 19


def lower_thread_priority(steps: int) -> str | None:
    """Move the calling thread ``steps`` nice values below its current priority (capped at
    :data:`MAX_NICE`). Returns None when done (or nothing to do), else why it was not done:
    the caller decides whether that deserves a warning."""
    if steps < 0:
        raise ValueError(f"nice steps must be >= 0, got {steps}")
    if not steps:
        return None
    if sys.platform != "linux":  # elsewhere PRIO_PROCESS with a thread id renices the process
        return f"per-thread nice values need Linux, not {sys.platform}"
    thread = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(MAX_NICE, current + steps))
    except OSError as exc:  # e.g. a seccomp profile without setpriority
        return f"setpriority failed: {exc}"
    return None


def call_at_lower_priority(steps: int, fn: Callable[[], R]) -> tuple[R, str | None]:
    """``fn()`` in a short-lived thread ``steps`` nice values below the caller, so the threads
    ``fn`` creates (e.g. ONNX Runtime's intra-op pool) inherit the lower priority while the
    caller keeps its own. Returns fn's result and :func:`lower_thread_priority`'s answer;
    fn's exception is raised in the caller. With ``steps`` 0, runs ``fn`` in the caller."""
    if not steps:
        return fn(), None
    outcome: list[R] = []
    failure: list[BaseException] = []
    reason: list[str | None] = [None]

    def run() -> None:
        reason[0] = lower_thread_priority(steps)
        try:
            outcome.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="inferplex-lowered", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0], reason[0]
