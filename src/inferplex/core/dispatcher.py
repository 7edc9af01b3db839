"""Dispatcher: the async driver of the batch queues and the cross-model scheduler.

It owns the clock and the one timer. Whenever something changes (a request arrives, a batch
finishes, a timer fires) one ``_pump`` runs on the event loop: it expires timed-out requests,
then, while the scheduler grants a slot, starts the ready batch of the model it picks on an
idle instance of that model, and finally arms the timer for the next moment a queue needs
attention (a queue delay or a deadline). Arrivals in one loop iteration share one pump.

Pipeline steps: when the scheduler picks a model whose queue holds a pipeline step, the ready
step with the longest chain of steps still ahead of it (its *precedence*, set by the
ensemble) starts instead, so a pipeline's critical path is not held up behind its short
branches while compute slots are scarce (docs/pipelines.md).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sized
from contextvars import ContextVar
from typing import Protocol

from inferplex.core.alarm import Alarm
from inferplex.core.batch import Batch, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.core.fifo import FifoQueue
from inferplex.core.lanes import LaneQueue
from inferplex.core.scheduler import ModelPolicy, Scheduler, Ticket
from inferplex.core.workers import WorkerPool

_now = time.perf_counter

#: the precedence of the pipeline step being requested in this context (0: not a step); set
#: by the engine's caller for the ensemble's step requests, read when the request is queued
STEP_PRECEDENCE: ContextVar[int] = ContextVar("inferplex_step_precedence", default=0)


class ServedVersion(Protocol):
    """What the dispatcher drives of one served version (its ``core.queueing.VersionQueue``): its
    queue and idle instances, and starting or failing what it queued."""

    @property
    def key(self) -> str:
        """The version's scheduler key, unique among the versions alive at once."""

    @property
    def composite(self) -> bool:
        """Only waits on other models: its batches take no scheduler slot."""

    #: the highest pipeline-step precedence among its queued requests; the dispatcher sets it
    #: to 0 when a batch it starts empties the queue
    precedence: int

    @property
    def idle(self) -> Sized:
        """Its instances free to start a batch."""

    @property
    def queue(self) -> DynamicBatcher | FifoQueue | LaneQueue: ...

    def launch(self, batch: Batch, ticket: Ticket | None) -> None:
        """Run ``batch`` on an idle instance; ``ticket`` is its scheduler slot."""

    def fail_expired(self, requests: list[PendingRequest]) -> None:
        """Answer ``requests``, taken out of the queue past their deadline, with an error."""


class Dispatcher:
    def __init__(
        self,
        scheduler: Scheduler,
        loop: asyncio.AbstractEventLoop,
        inline_execution_s: float = 0.0,
        learn_delay: bool = False,
    ) -> None:
        self.scheduler = scheduler
        #: batches measured to run within this many seconds may run on the event loop
        #: (``ServedVersion.launch``)
        self.inline_execution_s = inline_execution_s
        #: the batchers skip their queue delay while it gathers nothing (--queue-delay learned)
        self.learn_delay = learn_delay
        self._loop = loop
        self._versions: dict[str, ServedVersion] = {}
        self._policies: dict[str, ModelPolicy] = {}
        self._pending: set[ServedVersion] = set()  # versions that may have queued requests
        self._pump_queued = False
        #: the one wake-up: the earliest moment a queue needs attention (core/alarm.py: a
        #: queue delay is shorter than the loop's timers can keep)
        self._alarm = Alarm(loop, self._pump)
        #: the threads the instances of light models share (``core.workers``)
        self.workers = WorkerPool(scheduler.slots)

    def add(self, version: ServedVersion, policy: ModelPolicy) -> None:
        self.scheduler.register(version.key, policy)
        self._versions[version.key] = version
        self._policies[version.key] = policy

    def close(self) -> None:
        """Stop the worker and alarm threads (every model is freed: nothing runs). Blocking:
        call it off the loop."""
        self._alarm.close()
        self.workers.close()

    def remove(self, version: ServedVersion) -> None:
        """Forget a drained version (nothing of it queued or running)."""
        self._versions.pop(version.key, None)
        self._policies.pop(version.key, None)
        self._pending.discard(version)
        self.scheduler.unregister(version.key)

    def busy(self) -> bool:
        """Whether requests wait in a queue or batches run (what a paced load yields to)."""
        return bool(self._pending) or self.scheduler.running > 0

    # -- events ---------------------------------------------------------------------------
    def wake(self) -> None:
        """Something changed outside the events below (instances were added): pump soon."""
        if not self._pump_queued:
            self._pump_queued = True
            self._loop.call_soon(self._pump)

    def arrived(self, version: ServedVersion, deadline: float | None) -> None:
        """A request (with ``deadline``, if it has one) was queued for ``version``."""
        if not version.composite:  # a composite's batches never ask the scheduler for a slot
            self.scheduler.note_arrival(version.key, _now())
        self._pending.add(version)
        # While every instance of the version is busy, a pump could start nothing new for it
        # (and an arrival frees nothing for others): the finishing batch pumps. Only a
        # deadline needs the timer armed now.
        if (version.idle or deadline is not None) and not self._pump_queued:
            # arrivals in this loop iteration share one pump, and so can share one batch
            self._pump_queued = True
            self._loop.call_soon(self._pump)

    def finished(self, ticket: Ticket | None, now: float, latencies: list[float]) -> None:
        """A batch finished: its slot (``ticket``; None: a composite's) and instance are free
        again."""
        if ticket is not None:
            self.scheduler.finish(ticket, now, latencies)
        # with nothing queued anywhere there is nothing to start: the next arrival pumps
        if self._pending and not self._pump_queued:
            self._pump_queued = True
            self._loop.call_soon(self._pump)

    # -- the pump -------------------------------------------------------------------------
    def _pump(self, moment: float = 0.0) -> None:
        """``moment``: the alarm's, when it woke the pump (a few µs early counts as at it)."""
        self._pump_queued = False
        now = max(_now(), moment)
        active = [v for v in self._pending if v.queue.pending_requests]
        for version in active:
            expired = version.queue.expire(now)
            if expired:
                version.fail_expired(expired)
            if version.composite:  # (what it launches touches no other version's queue)
                self._launch_composite(version, now)
        scheduler = self.scheduler
        refused = False
        while True:
            ready = [
                v.key
                for v in active
                if not v.composite
                and v.idle
                and v.queue.pending_requests
                and _due(v.queue.next_wakeup(now), now)
            ]
            key = scheduler.pick(ready, now) if ready else None
            if key is None:
                # ready batches refused while slots were free (a reservation) arm the timer
                refused = bool(ready) and scheduler.running < scheduler.slots
                break
            version = self._versions[key]
            if version.precedence:
                version = self._critical_step(version, ready)
                key = version.key
            batch = version.queue.next_batch(now, True)
            if batch is None:  # cannot happen after a due wakeup; never spin on it
                break
            version.launch(batch, scheduler.start(key, now))
            if version.precedence and not version.queue.pending_requests:
                version.precedence = 0
        pending = self._pending = {v for v in active if v.queue.pending_requests}
        if pending or refused or self._alarm.at != math.inf:
            self._arm(now, scheduler.reservation_lifts() if refused else None)

    def _critical_step(self, picked: ServedVersion, ready: list[str]) -> ServedVersion:
        """The ready pipeline step to start in the slot granted to ``picked`` (a step too): the
        one with the highest precedence. Only a step that the scheduler could have picked as
        well takes the slot: no rate-limiter resources, a weight no lower than ``picked``'s."""
        best = picked
        weight = self._policies[picked.key].weight
        for key in ready:
            version = self._versions[key]
            if version.precedence > best.precedence:
                policy = self._policies[key]
                if not policy.resources and policy.weight >= weight:
                    best = version
        return best

    @staticmethod
    def _launch_composite(version: ServedVersion, now: float) -> None:
        """Start every ready batch of a composite version (a pipeline, a cascade) on its idle
        instances without a scheduler slot: it only waits on the models it calls, and
        holding slots while they wait for one could deadlock."""
        queue = version.queue
        while version.idle and queue.pending_requests and _due(queue.next_wakeup(now), now):
            batch = queue.next_batch(now, True)
            if batch is None:
                return
            version.launch(batch, None)
            if version.precedence and not queue.pending_requests:
                version.precedence = 0

    def _arm(self, now: float, lifts: float | None) -> None:
        """One timer at the earliest future moment a queue needs attention, or the scheduler's
        reservation lifts. Queues that are due now but got no slot or instance wait for a
        finishing batch, which pumps again."""
        wake = lifts if lifts is not None and lifts > now else math.inf
        for version in self._pending:
            at = version.queue.next_wakeup(now, bool(version.idle))
            if at is not None and now < at < wake:
                wake = at
        if wake == self._alarm.at:
            return
        if wake == math.inf:
            self._alarm.cancel()
        else:
            self._alarm.set(wake, now)


def _due(wakeup: float | None, now: float) -> bool:
    return wakeup is not None and wakeup <= now
