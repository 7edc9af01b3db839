"""VersionQueue: the queue of one served version, as the dispatcher sees it.

It holds the version's batch queue (a DynamicBatcher, or a FifoQueue for a model without
batching) and its adaptive batching, takes each validated request into the queue and tells
the dispatcher, and keeps the highest pipeline-step precedence among what is queued. It is
what the dispatcher registers and drives (``dispatcher.ServedVersion``): ``idle`` and
``launch`` are its version's execution's own list and method, so starting a batch costs no
extra call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.backends.base import ResponseSink
from inferplex.config.model_config import ModelConfig
from inferplex.core.adaptive import AdaptiveBatching
from inferplex.core.batch import Batch, PendingRequest
from inferplex.core.batcher import DynamicBatcher
from inferplex.core.dispatcher import STEP_PRECEDENCE
from inferplex.core.estimator import ExecutionEstimator
from inferplex.core.execution import Outputs, Payload, VersionExecution
from inferplex.core.fifo import FifoQueue
from inferplex.core.lanes import LaneQueue
from inferplex.core.sequences import batch_policy
from inferplex.errors import ConfigError, DeadlineExceededError, InvalidInputError
from inferplex.tracing.context import CURRENT as CURRENT_TRACE
from inferplex.tracing.context import TRACING
from inferplex.types import InferenceRequest, Parameters

if TYPE_CHECKING:
    from inferplex.core.dispatcher import Dispatcher
    from inferplex.core.instance import ModelInstance
    from inferplex.core.scheduler import Ticket

_now = time.perf_counter


class VersionQueue:
    """The requests of one version waiting for a batch. Everything runs on the event loop."""

    def __init__(
        self,
        config: ModelConfig,
        key: str,
        execution: VersionExecution,
        loop: asyncio.AbstractEventLoop,
        dispatcher: Dispatcher,
        estimator: ExecutionEstimator,
    ) -> None:
        self.key = key
        self.composite = execution.composite
        #: the execution's idle instances and what starts a batch on one (the dispatcher's)
        self.idle: list[ModelInstance] = execution.idle
        self.launch: Callable[[Batch, Ticket | None], None] = execution.launch
        self._answer = execution.answer
        self._per_request = execution.per_request
        batching = config.dynamic_batching
        if config.sequence_batching is not None:  # sequences share batches as it says
            batching = batch_policy(config.sequence_batching)
        # adaptive batching sets the delay itself (core/adaptive.py)
        slo_p99_ms = config.scheduling.slo_p99_ms
        adaptive_batching = config.scheduling.adaptive_batching and slo_p99_ms is not None

        def one_queue() -> DynamicBatcher | FifoQueue:
            if batching is not None and config.batched:
                return DynamicBatcher(
                    config.name,
                    config.max_batch_size,
                    batching,
                    estimator.estimate,
                    learn_delay=dispatcher.learn_delay and not adaptive_batching,
                )
            return FifoQueue()

        self.queue: DynamicBatcher | FifoQueue | LaneQueue
        if config.sequence_batching is not None and len(execution.instances) > 1:
            # each sequence keeps to one instance: a lane each
            lanes = [one_queue() for _ in execution.instances]
            self.queue = LaneQueue(lanes, execution.instances, execution.idle)
        else:
            self.queue = one_queue()
        self.adaptive: AdaptiveBatching | None = None
        if slo_p99_ms is not None and adaptive_batching and batching is not None and config.batched:
            if not isinstance(self.queue, DynamicBatcher):
                raise ConfigError(
                    f"model '{config.name}': scheduling.adaptive_batching tunes one batch "
                    "queue; a sequence model with more than one instance has one per instance"
                )
            self.adaptive = AdaptiveBatching(
                self.queue,
                estimator,
                slo_p99_ms * 1e-3,
                config.max_batch_size,
                batching.max_queue_delay_microseconds * 1e-6,
            )
            execution.adaptive_batch_done = self.adaptive.batch_done
        #: the highest pipeline-step precedence among the queued requests (0: none queued)
        self.precedence = 0
        self._name = config.name
        self._version = str(execution.version)
        self._loop = loop
        self._dispatcher = dispatcher

    def submit(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        shape_key: Any,
        outputs: list[str],
        start: int,
        sink: ResponseSink | None = None,
        lane: int = 0,
    ) -> asyncio.Future[Outputs]:
        """Queue the request; the future is answered when its batch has run (a decoupled
        model's request: its responses go to ``sink`` meanwhile; a sequence's: on the
        instance of ``lane``)."""
        priority, timeout_us = _scheduling_parameters(request.parameters)
        future: asyncio.Future[Outputs] = self._loop.create_future()
        arrival = start * 1e-9
        payload = Payload(feeds, outputs, future, start)
        if self._per_request:
            payload.request = request
            payload.sink = sink
        if TRACING.enabled and (trace := CURRENT_TRACE.get()) is not None:
            trace.queued(self._name, self._version, request.id, start)
            payload.trace = trace
        pending = PendingRequest(rows, shape_key, arrival, priority, timeout_us, payload)
        if lane:
            pending.lane = lane
        self.queue.submit(pending, arrival)
        precedence = STEP_PRECEDENCE.get()
        if precedence > self.precedence:
            self.precedence = precedence
        self._dispatcher.arrived(self, pending.deadline)
        return future

    def withdraw(self) -> None:
        """Take the requests whose callers went away out of the queue."""
        if self.queue.withdraw(_caller_gone) and not self.queue.pending_requests:
            self.precedence = 0

    def fail_expired(self, requests: list[PendingRequest]) -> None:
        """Answer the requests the queue dropped past their deadline with an error."""
        if not self.queue.pending_requests:
            self.precedence = 0
        for request in requests:
            self._answer(
                request,
                None,
                DeadlineExceededError(
                    f"model '{self._name}': request timed out after "
                    f"{(_now() - request.arrival) * 1e3:.1f} ms in the queue"
                ),
            )


def _caller_gone(request: PendingRequest) -> bool:
    """Whether nobody waits for the request's answer (its caller was cancelled)."""
    return bool(request.payload.future.done())


def _scheduling_parameters(parameters: Parameters) -> tuple[int, int]:
    """The V2 request parameters ``priority`` and ``timeout`` (microseconds)."""
    if not parameters or ("priority" not in parameters and "timeout" not in parameters):
        return 0, 0
    values = []
    for name in ("priority", "timeout"):
        value = parameters.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInputError(
                f"request parameter '{name}' must be a non-negative integer, got {value!r}"
            )
        values.append(value)
    return values[0], values[1]
