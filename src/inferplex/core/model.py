"""ModelVersion: one loaded version of a model — validation, its batch queue, its instances,
running batches (concatenate, execute, split) and answering every request exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from inferplex.backends.base import Backend, BatchRequest, Cancellation, RequestOutcome
from inferplex.config.model_config import ModelConfig
from inferplex.core.adaptive import AdaptiveBatching
from inferplex.core.batcher import Batch, DynamicBatcher, PendingRequest
from inferplex.core.cache import ResponseCache
from inferplex.core.datatypes import to_bytes_elements
from inferplex.core.dispatcher import STEP_PRECEDENCE
from inferplex.core.estimator import ExecutionEstimator
from inferplex.core.fifo import FifoQueue
from inferplex.core.instance import ModelInstance
from inferplex.core.stats import ModelStats
from inferplex.core.types import InferenceRequest, InferenceResponse, Parameters, Tensor
from inferplex.core.validation import RequestValidator
from inferplex.errors import (
    DeadlineExceededError,
    InferplexError,
    InvalidInputError,
    ModelExecutionError,
    ModelNotReadyError,
)
from inferplex.tracing.context import CURRENT as CURRENT_TRACE
from inferplex.tracing.context import TRACING, RequestTrace

if TYPE_CHECKING:
    from inferplex.core.dispatcher import Dispatcher
    from inferplex.core.scheduler import Ticket

_now_ns = time.perf_counter_ns
_now = time.perf_counter

Outputs = dict[str, np.ndarray]


@dataclass(slots=True)
class _Payload:
    """What a queued request carries for the driver."""

    feeds: dict[str, np.ndarray]
    outputs: list[str]
    future: asyncio.Future[Outputs]
    enqueued_ns: int
    trace: RequestTrace | None = None  # only while tracing is on
    request: InferenceRequest | None = None  # only for backends that see requests


#: one batch handed to an instance: (batch, scheduler ticket or None for a composite model,
#: the instance running it, what a cancellable backend is told of its requests' callers
#: going away or None)
_Job = tuple[Batch, "Ticket | None", ModelInstance, Cancellation | None]
#: what the worker hands back: (outputs per request in batch order, began, prepared, executed,
#: ended ns). ``began`` ends each request's queue time; the others bound the compute phases.
#: (a per-request backend's requests may each have failed alone: an error in place of outputs)
_Result = tuple[list[RequestOutcome], int, int, int, int]


class ModelVersion:
    """Serves one version of one model. ``infer`` and every callback run on the event loop."""

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        backends: list[Backend],
        loop: asyncio.AbstractEventLoop,
        dispatcher: Dispatcher,
        cache: ResponseCache | None = None,
        key: str = "",
    ) -> None:
        self.config = config
        self.version = version
        self.version_str = str(version)
        # unique among the versions alive at once (a reload runs a replacement beside the old)
        self.key = key or f"{config.name}/{version}"
        self.stats = ModelStats(config.name, self.version_str)
        self.estimator = ExecutionEstimator()
        self.queue: DynamicBatcher | FifoQueue
        batching = config.dynamic_batching
        self._adaptive: AdaptiveBatching | None = None
        if batching is not None and config.batched:
            self.queue = DynamicBatcher(
                config.name, config.max_batch_size, batching, self.estimator.estimate
            )
            scheduling = config.scheduling
            if scheduling.adaptive_batching and scheduling.slo_p99_ms is not None:
                self._adaptive = AdaptiveBatching(
                    self.queue,
                    self.estimator,
                    scheduling.slo_p99_ms * 1e-3,
                    config.max_batch_size,
                    batching.max_queue_delay_microseconds * 1e-6,
                )
        else:
            self.queue = FifoQueue()
        self.instances = [
            ModelInstance(
                f"{self.key}#{i}", backend, loop, self._run, self._done, config.scheduling.nice
            )
            for i, backend in enumerate(backends)
        ]
        self.idle = list(self.instances)
        #: batches may run on the event loop (``launch``): every instance can, the inputs have
        #: fixed shapes (so the time per batch size is stable) and the model keeps the
        #: server's priority
        self._inline = (
            bool(backends)
            and all(b.runs_inline for b in backends)
            and config.scheduling.nice == 0
            and all(-1 not in tensor.dims for tensor in config.input)
        )
        self._instances_made = len(self.instances)
        # instance count changes: instances still to take out of service as their batch ends
        self._retire_wanted = 0
        self._retired: list[ModelInstance] = []
        self._retire_done: asyncio.Future[list[ModelInstance]] | None = None
        #: only waits on other served models: its batches take no scheduler slot
        self.composite = bool(backends) and all(b.composite for b in backends)
        #: batches go to ``execute_requests``, and a request may fail alone
        self._per_request = bool(backends) and all(b.per_request for b in backends)
        #: a running batch is told which of its requests lost their callers
        self._cancellable = self._per_request and all(b.cancellable for b in backends)
        #: the cancellable batches running now, by instance
        self._running: dict[ModelInstance, _Job] = {}
        #: the highest pipeline-step precedence among the queued requests (0: none queued)
        self.precedence = 0
        self._validator = RequestValidator(config)
        self._batched = config.batched
        # per output: (datatype, the shape it is reshaped to for the client, or None)
        self._output_specs = {
            t.name: (t.data_type, None if t.reshape is None else tuple(t.dims))
            for t in config.output
        }
        self._output_order = [t.name for t in config.output]
        self._bytes_outputs = [t.name for t in config.output if t.data_type == "BYTES"]
        self._loop = loop
        self._dispatcher = dispatcher
        self._cache = cache if config.response_cache.enable else None
        self._ordered = batching is not None and batching.preserve_ordering
        self._held: dict[int, Callable[[], None]] = {}  # preserve_ordering: answers waiting
        self._next_seq = 0
        self._in_flight = 0
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._closing = False
        self._withdraw_queued = False

    # -- requests -----------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self._closing:
            raise ModelNotReadyError(
                f"model '{self.config.name}' version {self.version} is unloading"
            )
        start = _now_ns()
        if not self._in_flight:
            self._idle_event.clear()
        self._in_flight += 1
        ok = False
        try:
            feeds, rows = self._validator.feeds(request)
            names = self._validator.output_names(request)
            if self._cache is not None:
                results = await self._cached_results(request, feeds, rows, names, start)
            else:
                results = await self._queued_results(request, feeds, rows, names, start)
            specs = self._output_specs
            outputs = []
            for name in names:
                data = results[name]
                datatype, dims = specs[name]
                if dims is not None:
                    data = data.reshape((data.shape[0], *dims) if self._batched else dims)
                outputs.append(Tensor(name, datatype, data.shape, data))
            response = InferenceResponse(self.config.name, self.version_str, outputs, request.id)
            ok = True
            return response
        except asyncio.CancelledError:
            # the caller went away (a reset stream, a closed connection): its queued request
            # leaves the queue, so nothing runs for it and it holds no place in line; a
            # handler already running it is told
            self.stats.cancelled += 1
            self._withdraw_cancelled()
            raise
        finally:
            self.stats.record_request(ok, _now_ns() - start)
            self._in_flight -= 1
            if not self._in_flight:
                self._idle_event.set()

    async def _cached_results(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        outputs: list[str],
        start: int,
    ) -> Outputs:
        """The outputs from the response cache, else from a queued batch (then cached)."""
        assert self._cache is not None
        looked = _now_ns()
        cache_key = self._cache.key(self.key, feeds, outputs)
        cached = self._cache.get(cache_key)
        self.stats.record_cache(cached is not None, _now_ns() - looked)
        if cached is not None:
            return cached
        results = await self._queued_results(request, feeds, rows, outputs, start)
        self._cache.put(cache_key, results)
        return results

    def _queued_results(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        outputs: list[str],
        start: int,
    ) -> asyncio.Future[Outputs]:
        """Queue the request; the future is answered when its batch has run."""
        priority, timeout_us = _scheduling_parameters(request.parameters)
        future: asyncio.Future[Outputs] = self._loop.create_future()
        shape_key = self._validator.shape_key(feeds) if self._batched else None
        arrival = start * 1e-9
        payload = _Payload(feeds, outputs, future, start)
        if self._per_request:
            payload.request = request
        if TRACING.enabled and (trace := CURRENT_TRACE.get()) is not None:
            trace.queued(self.config.name, self.version_str, request.id, start)
            payload.trace = trace
        pending = PendingRequest(rows, shape_key, arrival, priority, timeout_us, payload)
        self.queue.submit(pending, arrival)
        precedence = STEP_PRECEDENCE.get()
        if precedence > self.precedence:
            self.precedence = precedence
        self._dispatcher.arrived(self, pending.deadline)
        return future

    def _withdraw_cancelled(self) -> None:
        """Take the requests whose callers were cancelled out of the queue, and tell the
        running batches that hold others, once for all those cancelled in this turn of the
        event loop."""
        if not self._withdraw_queued:
            self._withdraw_queued = True
            self._loop.call_soon(self._withdraw)

    def _withdraw(self) -> None:
        self._withdraw_queued = False
        if self.queue.withdraw(_caller_gone) and not self.queue.pending_requests:
            self.precedence = 0
        for batch, _, _, cancellation in self._running.values():
            gone = [i for i, r in enumerate(batch.requests) if r.payload.future.done()]
            if gone:
                assert cancellation is not None
                # a few shared-memory stores for the Python backend: nothing here waits
                cancellation.cancel(gone)

    # -- batches: called by the dispatcher -------------------------------------------------------
    def launch(self, batch: Batch, ticket: Ticket | None) -> None:
        """Run ``batch`` on an idle instance (the dispatcher checked there is one): on the
        event loop when it is measured to take less than the hand-over to the instance's
        thread and back, else in that thread."""
        instance = self.idle.pop()
        if self._cancellable:
            job: _Job = (batch, ticket, instance, Cancellation())
            self._running[instance] = job
        else:
            job = (batch, ticket, instance, None)
        if self._runs_inline(batch.rows):
            instance.run_inline(job)
        else:
            instance.run(job)
        if not self.queue.pending_requests:
            self.precedence = 0

    def _runs_inline(self, rows: int) -> bool:
        if not self._inline:
            return False
        estimate = self.estimator.estimate(rows)
        return estimate is not None and estimate <= self._dispatcher.inline_execution_s

    def _run(self, backend: Backend, job: _Job) -> _Result:
        """Runs in the instance's worker thread: concatenate, execute, split. Everything here
        holds the GIL the event loop needs, so it does no more than it must."""
        began = _now_ns()
        batch = job[0]
        requests = batch.requests
        first: _Payload = requests[0].payload
        single = len(requests) == 1
        wanted = first.outputs
        alike = True  # every request wants the same outputs (the same list: all, usually)
        if single:
            feeds = first.feeds
        else:
            feeds = {
                name: np.concatenate([r.payload.feeds[name] for r in requests])
                for name in first.feeds
            }
            if any(r.payload.outputs is not wanted for r in requests):
                alike = False
                names = {n for r in requests for n in r.payload.outputs}
                wanted = [n for n in self._output_order if n in names]
        prepared = _now_ns()
        try:
            if self._per_request:
                infos = _batch_requests(requests)
                if job[3] is not None:
                    answers = backend.execute_requests(feeds, wanted, infos, job[3])
                else:
                    answers = backend.execute_requests(feeds, wanted, infos)
            else:
                results = backend.execute(feeds, wanted)
        except InferplexError:
            raise
        except Exception as exc:
            raise ModelExecutionError(
                f"model '{self.config.name}' version {self.version} failed: {exc}"
            ) from exc
        executed = _now_ns()
        if self._per_request:
            return self._answers(answers, batch), began, prepared, executed, _now_ns()
        self._bytes_elements(results)
        outputs = [results] if single else self._split(results, batch, wanted, alike)
        return cast(list[RequestOutcome], outputs), began, prepared, executed, _now_ns()

    def _bytes_elements(self, results: Outputs) -> None:
        for name in self._bytes_outputs:
            array = results.get(name)
            if array is not None:
                results[name] = to_bytes_elements(array)

    def _answers(self, answers: list[RequestOutcome], batch: Batch) -> list[RequestOutcome]:
        """A per-request backend's answers, each with the outputs its request asked for."""
        if len(answers) != len(batch.requests):
            raise ModelExecutionError(
                f"model '{self.config.name}' answered {len(answers)} of the "
                f"{len(batch.requests)} requests of a batch"
            )
        kept: list[RequestOutcome] = []
        for request, answer in zip(batch.requests, answers, strict=True):
            if not isinstance(answer, InferplexError):
                self._bytes_elements(answer)
                answer = {name: answer[name] for name in request.payload.outputs}
            kept.append(answer)
        return kept

    def _split(
        self, results: Outputs, batch: Batch, wanted: list[str], alike: bool
    ) -> list[Outputs]:
        """Each request's rows of the outputs it asked for (views, no copies)."""
        for name, array in results.items():
            if array.ndim == 0 or array.shape[0] != batch.rows:
                raise ModelExecutionError(
                    f"model '{self.config.name}' output '{name}' has shape {list(array.shape)}; "
                    f"a batched model must return {batch.rows} rows, one per input row"
                )
        if alike and wanted and batch.rows == len(batch.requests):
            # one row each, the usual case: each output's row views come from one call
            columns = [list(results[name][:, None]) for name in wanted]
            return [dict(zip(wanted, row, strict=True)) for row in zip(*columns, strict=True)]
        split: list[Outputs] = []
        offset = 0
        for request in batch.requests:
            end = offset + request.rows
            split.append({name: results[name][offset:end] for name in request.payload.outputs})
            offset = end
        return split

    def _done(self, job: _Job, result: _Result | None, error: BaseException | None) -> None:
        """On the event loop: a batch finished; free its instance and slot, answer it."""
        batch, ticket, instance, cancellation = job
        if cancellation is not None:
            del self._running[instance]
        if self._retire_wanted:
            self._retire(instance)
        else:
            self.idle.append(instance)
        requests = batch.requests
        now = _now()
        self._dispatcher.finished(self, ticket, now, [now - r.arrival for r in requests])
        if result is None:
            if not isinstance(error, InferplexError):
                error = ModelExecutionError(f"model '{self.config.name}' failed: {error}")
            for request in requests:
                self._answer(request, None, error)
            return
        outputs, began, prepared, executed, ended = result
        self.estimator.observe(batch.rows, (executed - prepared) * 1e-9)
        if self._adaptive is not None:
            self._adaptive.batch_done()
        self.stats.record_batch(
            batch.rows,
            began,
            [r.payload.enqueued_ns for r in requests],
            prepared - began,
            executed - prepared,
            ended - executed,
        )
        if TRACING.enabled:
            for request in requests:
                if (trace := request.payload.trace) is not None:
                    trace.batch(
                        began, prepared, executed, ended, batch.rows, len(requests), instance.label
                    )
        if self._ordered or self._per_request:
            for request, answer in zip(requests, outputs, strict=True):
                if isinstance(answer, InferplexError):  # a per-request backend failed it alone
                    self._answer(request, None, answer)
                else:
                    self._answer(request, answer, None)
            return
        for request, answer in zip(requests, outputs, strict=True):
            future = request.payload.future
            if not future.done():  # else the caller went away
                future.set_result(answer)

    def fail_expired(self, requests: list[PendingRequest]) -> None:
        if not self.queue.pending_requests:
            self.precedence = 0
        for request in requests:
            self._answer(
                request,
                None,
                DeadlineExceededError(
                    f"model '{self.config.name}': request timed out after "
                    f"{(_now() - request.arrival) * 1e3:.1f} ms in the queue"
                ),
            )

    def _answer(self, request: PendingRequest, outputs: Outputs | None, error: Any) -> None:
        future = request.payload.future

        def resolve() -> None:
            if future.done():  # the caller went away
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(outputs)

        if not self._ordered:
            resolve()
            return
        self._held[request.seq] = resolve
        while self._next_seq in self._held:
            self._held.pop(self._next_seq)()
            self._next_seq += 1

    def statistics(self) -> dict[str, Any]:
        """Triton's statistics of this version, plus why its batches closed and how many
        requests were cancelled (their callers went away)."""
        stats = self.stats.to_dict()
        stats["batch_close_reasons"] = {str(k): n for k, n in self.queue.close_reasons.items()}
        stats["cancelled_count"] = self.stats.cancelled
        return stats

    # -- life cycle ----------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests accepted and not answered yet."""
        return self._in_flight

    def add_instances(self, backends: list[Backend]) -> None:
        """Put more instances into service (their backends were made off the loop)."""
        for backend in backends:
            label = f"{self.key}#{self._instances_made}"
            self._instances_made += 1
            instance = ModelInstance(
                label, backend, self._loop, self._run, self._done, self.config.scheduling.nice
            )
            self.instances.append(instance)
            self.idle.append(instance)
        self._dispatcher.wake()

    def retire_instances(self, count: int) -> asyncio.Future[list[ModelInstance]]:
        """Take ``count`` instances out of service: idle ones now, busy ones as soon as their
        batch ends (in-flight work is unaffected). The future gives the retired instances,
        to be closed off the loop. One retirement at a time; at least one instance stays."""
        if self._retire_done is not None:
            raise RuntimeError(f"{self.key}: instances are already being retired")
        if not 0 < count < len(self.instances):
            raise ValueError(f"{self.key}: cannot retire {count} of {len(self.instances)}")
        future: asyncio.Future[list[ModelInstance]] = self._loop.create_future()
        self._retire_done = future
        self._retire_wanted = count
        while self._retire_wanted and self.idle:
            self._retire(self.idle.pop())
        return future

    def _retire(self, instance: ModelInstance) -> None:
        self.instances.remove(instance)
        self._retired.append(instance)
        self._retire_wanted -= 1
        if not self._retire_wanted and self._retire_done is not None:
            future, self._retire_done = self._retire_done, None
            retired, self._retired = self._retired, []
            future.set_result(retired)

    async def drain(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait until every accepted one is answered."""
        self._closing = True
        await asyncio.wait_for(self._idle_event.wait(), timeout)

    def close(self) -> None:
        """Stop the workers and free the instances (blocking: run it off the loop)."""
        for instance in self.instances:
            instance.close()


def _caller_gone(request: PendingRequest) -> bool:
    """Whether nobody waits for the request's answer (its caller was cancelled)."""
    return bool(request.payload.future.done())


def _batch_requests(requests: list[PendingRequest]) -> list[BatchRequest]:
    """Who asked for the rows of a batch, for a per-request backend."""
    infos = []
    for pending in requests:
        source = pending.payload.request
        assert source is not None  # set for every request of a per-request model
        infos.append(BatchRequest(source.id, dict(source.parameters), pending.rows))
    return infos


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
