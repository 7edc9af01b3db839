"""Low-priority threads for the blocking work of loads: reading a model's files and config,
planning it, freeing replaced versions.

A load runs beside serving. On a busy machine every millisecond of CPU the load takes is
taken from serving (bench/lifecycle.py: throughput during a version swap fell to about half
with this work at the server's priority). Linux sets the nice value per thread, so these
threads run at a higher nice value (lower priority): the scheduler gives serving the cores
first and the load takes what is left. The cost is a longer load on a saturated machine.

Work that creates threads which go on serving must not run here: a thread inherits the
nice value of the thread that created it, and lowering it again needs privilege. ONNX
Runtime creates a session's intra-op thread pool when the session is created, so instance
creation (the backends) stays at the server's priority.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from inferplex.threadprio import MAX_NICE, lower_thread_priority

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

#: worker threads: loads run one at a time, while versions they replaced are freed
WORKERS = 2


class BackgroundWork:
    """An executor whose threads run ``nice`` steps below the server's priority (0: at it;
    Linux only)."""

    def __init__(self, nice: int) -> None:
        if not 0 <= nice <= MAX_NICE:
            raise ValueError(f"nice must be 0 to {MAX_NICE}, got {nice}")
        self.nice = nice
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)`` in a low-priority thread, awaited on the event loop."""
        if self._executor is None:  # made on first use: most servers load only at start
            self._executor = ThreadPoolExecutor(
                WORKERS, thread_name_prefix="inferplex-load", initializer=self._lower_priority
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(*args, **kwargs))

    def _lower_priority(self) -> None:
        reason = lower_thread_priority(self.nice)
        if reason is not None:
            logger.warning("load threads keep the server's priority: %s", reason)

    def close(self) -> None:
        """Let the threads end once their work is done (nothing waits for them)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
