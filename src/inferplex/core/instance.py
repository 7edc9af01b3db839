"""Model instances: each a backend object with its own dedicated worker thread.

The instances of one model version take jobs from one shared queue, so an idle instance picks
up the next job. The worker answers each job with one ``call_soon_threadsafe``; the event loop
never runs model code (DESIGN.md: a dedicated thread fed by a queue is cheaper than
``run_in_executor``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inferplex.backends.base import Backend

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Job:
    """One unit of work for an instance; ``payload`` is what ``run`` takes."""

    payload: Any
    future: asyncio.Future[Any]
    enqueued_ns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


#: runs one job on one backend in the worker thread; returns the job's result
RunFn = Callable[[Backend, Job], Any]


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller went away (cancelled); nothing to answer
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class InstancePool:
    """Worker threads, one per backend instance, fed by one queue."""

    def __init__(
        self,
        label: str,
        backends: list[Backend],
        run: RunFn,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._label = label
        self._backends = backends
        self._run = run
        self._loop = loop
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, args=(backend,), name=f"{label}#{i}", daemon=True)
            for i, backend in enumerate(backends)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def size(self) -> int:
        return len(self._backends)

    def submit(self, job: Job) -> None:
        self._queue.put(job)

    def _work(self, backend: Backend) -> None:
        call_soon = self._loop.call_soon_threadsafe
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                result = self._run(backend, job)
            except BaseException as exc:  # answer every job, whatever the backend raised
                call_soon(_resolve, job.future, None, exc)
            else:
                call_soon(_resolve, job.future, result, None)

    def close(self) -> None:
        """Stop the workers once the jobs already queued are done, then free the backends.
        Blocking: call it off the event loop."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        for backend in self._backends:
            try:
                backend.close()
            except Exception:
                logger.exception("closing an instance of %s failed", self._label)
