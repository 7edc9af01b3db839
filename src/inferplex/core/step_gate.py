"""SchedulerGate: a backend's units of work on its own thread (the LLM engine's steps) as
batches of the cross-model scheduler (``backends.step_gate``).

The gate is a served version to the dispatcher, with one instance and a FIFO queue: a unit
that asks for a slot queues a one-row request and the dispatcher starts it when the
scheduler picks the gate, weighing it against every other ready model by the config's
scheduling settings (weight, SLO, rate-limiter resources) exactly as a batch. "Starting" it
hands the ticket to the waiting thread; the unit's end returns the ticket with the unit's
latency (asked to done), which is what the adaptive policy's p99 of the gate counts.
Everything but ``acquire``, ``release`` and ``close`` runs on the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from dataclasses import dataclass

from inferplex.config.model_config import ModelConfig
from inferplex.core.batch import Batch, PendingRequest
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.fifo import FifoQueue
from inferplex.core.registry import scheduling_policy
from inferplex.core.scheduler import Ticket

_now = time.perf_counter


@dataclass(frozen=True, slots=True)
class Grant:
    """A slot granted to one unit: the scheduler's ticket and when the unit asked."""

    ticket: Ticket
    asked: float


class SchedulerGate:
    """A ``StepGate`` over the dispatcher's scheduler (see the module docstring)."""

    composite = False  # (its units are what take the slots)
    precedence = 0  # never a pipeline step

    def __init__(
        self,
        dispatcher: Dispatcher,
        loop: asyncio.AbstractEventLoop,
        config: ModelConfig,
        key: str,
    ) -> None:
        self.key = key
        self.queue = FifoQueue()
        #: one unit at a time: the gate itself while no unit holds a slot
        self.idle: list[SchedulerGate] = [self]
        self._dispatcher = dispatcher
        self._loop = loop
        self._lock = threading.Lock()
        self._closed = False
        self._waiting: concurrent.futures.Future[Grant] | None = None
        loop.call_soon_threadsafe(dispatcher.add, self, scheduling_policy(config))

    # -- the backend's thread ------------------------------------------------------------------
    def acquire(self) -> Grant | None:
        future: concurrent.futures.Future[Grant] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                return None
            self._waiting = future
        try:
            self._loop.call_soon_threadsafe(self._ask, future)
            return future.result()
        except (RuntimeError, concurrent.futures.CancelledError):  # the loop or gate closed
            return None

    def release(self, grant: object) -> None:
        assert isinstance(grant, Grant)
        done = _now()
        with contextlib.suppress(RuntimeError):  # a closed loop: nothing schedules any more
            self._loop.call_soon_threadsafe(self._finish, grant, done)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting = self._waiting
        if waiting is not None:
            waiting.cancel()  # (only while not granted yet: a granted unit releases)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._remove)

    # -- the event loop: what the dispatcher drives --------------------------------------------
    def _ask(self, future: concurrent.futures.Future[Grant]) -> None:
        if future.done():  # closed meanwhile
            return
        now = _now()
        self.queue.submit(PendingRequest(1, None, now, payload=future), now)
        self._dispatcher.arrived(self, None)

    def launch(self, batch: Batch, ticket: Ticket | None) -> None:
        assert ticket is not None
        self.idle.clear()
        request = batch.requests[0]
        grant = Grant(ticket, request.arrival)
        future: concurrent.futures.Future[Grant] = request.payload
        if future.set_running_or_notify_cancel():
            future.set_result(grant)
        else:  # the gate closed while the unit waited: the slot goes back at once
            self._finish(grant, _now())

    def fail_expired(self, requests: list[PendingRequest]) -> None:
        """Never called: a unit's request has no deadline."""

    def _finish(self, grant: Grant, done: float) -> None:
        self.idle.append(self)
        self._dispatcher.finished(grant.ticket, done, [done - grant.asked])

    def _remove(self) -> None:
        for request in self.queue.drain():
            request.payload.cancel()
        self._dispatcher.remove(self)
