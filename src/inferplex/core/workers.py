"""WorkerPool: the threads that the instances of light models share.

A server of hundreds of small models cannot give each instance a thread of its own (a
thousand models made two thousand threads). Their batches run on these threads instead, fed
by one queue as a dedicated thread is (DESIGN.md: a thread fed by a queue, answering with one
``call_soon_threadsafe`` per batch). The pool starts a thread only when a job finds none
waiting, up to its size — the scheduler's slots, which bound the batches running
server-wide — so a started batch waits for a thread at most while one finishes handing its
batch back (the loop may start the next batch before that thread takes its next turn).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)


class Job(NamedTuple):
    """One job for a pool thread: ``run(argument)``."""

    run: Callable[[Any], None]
    argument: Any


class WorkerPool:
    """Up to ``size`` threads that run jobs as they come, started as jobs find none waiting."""

    def __init__(self, size: int, name: str = "inferplex-worker") -> None:
        self._size = max(1, size)
        self._name = name
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting = 0  # threads waiting for a job that no job has been promised to
        self._threads: list[threading.Thread] = []

    @property
    def size(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def submit(self, run: Callable[[Any], None], job: Any) -> None:
        """Run ``run(job)`` on a pool thread (``run`` handles its own errors)."""
        with self._lock:
            if self._waiting:
                self._waiting -= 1
            elif len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        self._queue.put(Job(run, job))

    def _work(self) -> None:
        get, lock = self._queue.get, self._lock
        while True:
            item = get()
            if item is None:
                return
            run, job = item
            try:
                run(job)
            except Exception:  # ``run`` answers its own errors; one that escapes is a bug
                logger.exception("a job on %s failed", threading.current_thread().name)
            with lock:
                self._waiting += 1

    def close(self) -> None:
        """Stop every thread after the jobs already queued (blocking: off the event loop)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self._waiting = 0
