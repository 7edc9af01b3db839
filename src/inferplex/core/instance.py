"""Model instances: each a backend object with a worker thread of its own and its queue, or
(a light model's, ``core.workers``) the server's shared worker threads.

The dispatcher hands a batch to an idle instance; the worker runs it and answers with one
``call_soon_threadsafe`` per batch (DESIGN.md: a dedicated thread fed by a queue is cheaper
than ``run_in_executor``). The one exception: a batch measured to take less than the hand-over
itself runs on the event loop (``run_inline``; here the hand-over and back costs about 85 µs of
wall time and 65 µs of CPU, more than a whole add_sub batch). What the worker runs and
what answers on the loop are fixed when the instance is made, so handing over a batch
allocates nothing but the job itself. A model configured with ``scheduling { nice: N }``
gets a worker thread N nice steps below the server (:mod:`inferplex.threadprio`).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from inferplex.backends.base import Backend
from inferplex.core.workers import WorkerPool
from inferplex.threadprio import lower_thread_priority

logger = logging.getLogger(__name__)

#: runs a job in the worker thread with the instance's backend; its result goes to ``Done``
Work = Callable[[Backend, Any], Any]
#: called on the event loop with (job, result, None) or (job, None, error)
Done = Callable[[Any, Any, BaseException | None], None]


class ModelInstance:
    """One backend instance and the thread that runs its jobs (batches), one at a time: its
    own, or with ``pool`` one of the pool's (a light model's; never with ``nice``)."""

    def __init__(
        self,
        label: str,
        backend: Backend,
        loop: asyncio.AbstractEventLoop,
        work: Work,
        done: Done,
        nice: int = 0,
        pool: WorkerPool | None = None,
    ) -> None:
        self.label = label
        self.nice = nice
        self._backend = backend
        self._loop = loop
        self._work_fn = work
        self._done = done
        self._pool = pool
        #: its backend has been freed (``close``)
        self.closed = False
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        if pool is None:
            self._thread = threading.Thread(target=self._work, name=label, daemon=True)
            self._thread.start()
        else:
            assert not nice, "a pool thread keeps the server's priority"

    @property
    def backend(self) -> Backend:
        """The instance's backend (observers read engine statistics from it)."""
        return self._backend

    def run(self, job: Any) -> None:
        """Queue ``job`` (not None); ``done`` is called on the event loop with its outcome."""
        if self._pool is not None:
            self._pool.submit(self._execute, job)
        else:
            self._queue.put(job)

    def _execute(self, job: Any) -> None:
        """In the worker thread (its own or a pool's): run ``job``, answer on the loop."""
        try:
            result = self._work_fn(self._backend, job)
        except BaseException as exc:  # every job is answered, whatever the backend raised
            self._loop.call_soon_threadsafe(self._done, job, None, exc)
        else:
            self._loop.call_soon_threadsafe(self._done, job, result, None)

    def run_inline(self, job: Any) -> None:
        """Run ``job`` now, on the event loop (the caller's thread), for a batch measured to be
        cheaper than the hand-over to the worker and back; ``done`` is called as after ``run``,
        from the loop's next turn. The instance is idle, so its worker is not using the
        backend."""
        try:
            result = self._work_fn(self._backend, job)
        except Exception as exc:  # answered like a failure in the worker thread
            self._loop.call_soon(self._done, job, None, exc)
        else:
            self._loop.call_soon(self._done, job, result, None)

    def _work(self) -> None:
        # the worker runs the backend's compute (all of it with one intra-op thread), so its
        # priority is the model's share of a contended core
        reason = lower_thread_priority(self.nice)
        if reason is not None:
            logger.warning("instance %s keeps the server's priority: %s", self.label, reason)
        get, execute = self._queue.get, self._execute
        while True:
            job = get()
            if job is None:
                return
            execute(job)

    def close(self) -> None:
        """Stop the worker after the work already queued (a pooled instance is idle when it
        is closed: it was drained or retired), then free the backend. Blocking: call it off
        the event loop."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        try:
            self._backend.close()
        except Exception:
            logger.exception("closing instance %s failed", self.label)
        self.closed = True
