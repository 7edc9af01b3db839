"""Model instances: each a backend object with its own dedicated worker thread and queue.

The dispatcher hands a batch to an idle instance; the worker runs it and answers with one
``call_soon_threadsafe`` per batch. The event loop never runs model code (DESIGN.md: a
dedicated thread fed by a queue is cheaper than ``run_in_executor``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from inferplex.backends.base import Backend

logger = logging.getLogger(__name__)

#: work for the worker thread: takes the backend, returns the result
Work = Callable[[Backend], Any]
#: called on the event loop with (result, None) or (None, error)
Done = Callable[[Any, BaseException | None], None]


class ModelInstance:
    """One backend instance and the thread that runs its batches, one at a time."""

    def __init__(self, label: str, backend: Backend, loop: asyncio.AbstractEventLoop) -> None:
        self.label = label
        self._backend = backend
        self._loop = loop
        self._queue: queue.SimpleQueue[tuple[Work, Done] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=label, daemon=True)
        self._thread.start()

    def run(self, work: Work, done: Done) -> None:
        """Queue ``work``; ``done`` is called on the event loop with its outcome."""
        self._queue.put((work, done))

    def _work(self) -> None:
        call_soon = self._loop.call_soon_threadsafe
        backend = self._backend
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, done = item
            try:
                result = work(backend)
            except BaseException as exc:  # every batch is answered, whatever the backend raised
                call_soon(done, None, exc)
            else:
                call_soon(done, result, None)

    def close(self) -> None:
        """Stop the worker after the work already queued, then free the backend.
        Blocking: call it off the event loop."""
        self._queue.put(None)
        self._thread.join()
        try:
            self._backend.close()
        except Exception:
            logger.exception("closing instance %s failed", self.label)
