"""VersionExecution: the instances of one served version and the batches they run —
concatenate, execute, split — answering each request of a batch exactly once.

The dispatcher starts a batch with ``launch`` on an idle instance; the instance's worker
thread runs ``_run`` and hands the result to ``_done`` on the event loop, which frees the
instance and the scheduler slot and answers the requests' futures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from inferplex.backends.base import (
    Backend,
    BatchOutcome,
    BatchRequest,
    Cancellation,
    ResponseSink,
    StillSending,
)
from inferplex.config.model_config import ModelConfig
from inferplex.core.batch import Batch, PendingRequest
from inferplex.core.estimator import ExecutionEstimator
from inferplex.core.instance import ModelInstance
from inferplex.core.stats import ModelStats
from inferplex.datatypes import to_bytes_elements
from inferplex.errors import InferplexError, ModelExecutionError
from inferplex.tracing.context import TRACING, RequestTrace
from inferplex.types import InferenceRequest

if TYPE_CHECKING:
    from inferplex.core.dispatcher import Dispatcher
    from inferplex.core.scheduler import Ticket

_now_ns = time.perf_counter_ns
_now = time.perf_counter

Outputs = dict[str, np.ndarray]


@dataclass(slots=True)
class Payload:
    """What a queued request carries for the driver."""

    feeds: dict[str, np.ndarray]
    outputs: list[str]
    future: asyncio.Future[Outputs]
    enqueued_ns: int
    trace: RequestTrace | None = None  # only while tracing is on
    request: InferenceRequest | None = None  # only for backends that see requests
    sink: ResponseSink | None = None  # only for a decoupled model's: where responses go


class _Job(NamedTuple):
    """One batch handed to an instance."""

    batch: Batch
    ticket: Ticket | None
    """the scheduler's; None for a composite model"""
    instance: ModelInstance
    """the instance running it"""
    cancellation: Cancellation | None
    """what a cancellable backend is told of its requests' callers going away; else None"""


class _Result(NamedTuple):
    """What the worker hands back. ``began`` ends each request's queue time; the other
    times (ns) bound the compute phases."""

    outputs: list[BatchOutcome]
    """per request, in batch order (a per-request backend's requests may each have failed
    alone, and a decoupled one's may still be sending: an outcome in place of outputs)"""
    began: int
    prepared: int
    executed: int
    ended: int


class VersionExecution:
    """Runs one version's batches on its instances. Every callback runs on the event loop
    except ``_run``, which runs in an instance's worker thread."""

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        key: str,
        backends: list[Backend],
        loop: asyncio.AbstractEventLoop,
        dispatcher: Dispatcher,
        stats: ModelStats,
        estimator: ExecutionEstimator,
    ) -> None:
        self.config = config
        self.version = version
        self.key = key
        #: the version's counters (replaced as a whole when a reload keeps the old ones)
        self.stats = stats
        self.estimator = estimator
        self.adaptive_batch_done: Callable[[], None] | None = None
        self._loop = loop
        self._dispatcher = dispatcher
        self.instances = [self._instance(f"{key}#{i}", b) for i, b in enumerate(backends)]
        #: never rebound: the version's queue reads the same list
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
        self.per_request = bool(backends) and all(b.per_request for b in backends)
        #: a running batch is told which of its requests lost their callers
        self._cancellable = self.per_request and all(b.cancellable for b in backends)
        #: the cancellable batches running now, by instance
        self._running: dict[ModelInstance, _Job] = {}
        #: cancellable batches that ended with requests still sending responses (a decoupled
        #: model's threads): their callers' going away is passed on too
        self._sending: list[_Job] = []
        self._output_order = [t.name for t in config.output]
        if config.sequence_batching is not None:  # its state outputs are asked for too
            self._output_order += sorted(config.sequence_batching.state_outputs)
        self._bytes_outputs = [t.name for t in config.output if t.data_type == "BYTES"]
        batching = config.dynamic_batching
        self._ordered = batching is not None and batching.preserve_ordering
        self._held: dict[int, Callable[[], None]] = {}  # preserve_ordering: answers waiting
        self._next_seq = 0

    def _instance(self, label: str, backend: Backend) -> ModelInstance:
        """An instance of ``backend``: on the shared worker threads when it computes in this
        process without blocking and keeps the server's priority, else on its own thread."""
        nice = self.config.scheduling.nice
        pool = self._dispatcher.workers if backend.runs_inline and not nice else None
        return ModelInstance(label, backend, self._loop, self._run, self._done, nice, pool)

    # -- batches: called by the dispatcher -------------------------------------------------------
    def launch(self, batch: Batch, ticket: Ticket | None) -> None:
        """Run ``batch`` on an idle instance (the dispatcher checked there is one; for a
        batch of a lane, that lane's instance): on the event loop when it is measured to take
        less than the hand-over to the instance's thread and back, else in that thread."""
        if batch.lane < 0:
            instance = self.idle.pop()
        else:
            instance = self.instances[batch.lane]
            self.idle.remove(instance)
        if self._cancellable:
            job = _Job(batch, ticket, instance, Cancellation())
            self._running[instance] = job
        else:
            job = _Job(batch, ticket, instance, None)
        if self._runs_inline(batch.rows):
            instance.run_inline(job)
        else:
            instance.run(job)

    def _runs_inline(self, rows: int) -> bool:
        if not self._inline:
            return False
        estimate = self.estimator.estimate(rows)
        return estimate is not None and estimate <= self._dispatcher.inline_execution_s

    def cancel_gone(self) -> None:
        """Tell each running batch (and each whose requests still send) which of its
        requests lost their callers."""
        for job in [*self._running.values(), *self._sending]:
            gone = [i for i, r in enumerate(job.batch.requests) if r.payload.future.done()]
            if gone:
                assert job.cancellation is not None
                # a few shared-memory stores for the Python backend: nothing here waits
                job.cancellation.cancel(gone)
        self._sending = [job for job in self._sending if not _all_done(job.batch)]

    def _run(self, backend: Backend, job: _Job) -> _Result:
        """Runs in the instance's worker thread: concatenate, execute, split. Everything here
        holds the GIL the event loop needs, so it does no more than it must."""
        began = _now_ns()
        batch = job.batch
        requests = batch.requests
        first: Payload = requests[0].payload
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
            if self.per_request:
                infos = _batch_requests(requests)
                if job.cancellation is not None:
                    answers = backend.execute_requests(feeds, wanted, infos, job.cancellation)
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
        if self.per_request:
            return _Result(self._answers(answers, batch), began, prepared, executed, _now_ns())
        self._bytes_elements(results)
        outputs = [results] if single else self._split(results, batch, wanted, alike)
        return _Result(cast(list[BatchOutcome], outputs), began, prepared, executed, _now_ns())

    def _bytes_elements(self, results: Outputs) -> None:
        for name in self._bytes_outputs:
            array = results.get(name)
            if array is not None:
                results[name] = to_bytes_elements(array)

    def _answers(self, answers: list[BatchOutcome], batch: Batch) -> list[BatchOutcome]:
        """A per-request backend's answers, each with the outputs its request asked for."""
        if len(answers) != len(batch.requests):
            raise ModelExecutionError(
                f"model '{self.config.name}' answered {len(answers)} of the "
                f"{len(batch.requests)} requests of a batch"
            )
        kept: list[BatchOutcome] = []
        for request, answer in zip(batch.requests, answers, strict=True):
            # a decoupled model's request was answered through its sink
            if isinstance(answer, dict) and request.payload.sink is None:
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
        self._dispatcher.finished(ticket, now, [now - r.arrival for r in requests])
        if result is None:
            self._fail(requests, error)
            return
        outputs, began, prepared, executed, ended = result
        self.estimator.observe(batch.rows, (executed - prepared) * 1e-9)
        if self.adaptive_batch_done is not None:
            self.adaptive_batch_done()
        self.stats.record_batch(
            batch.rows,
            began,
            [r.payload.enqueued_ns for r in requests],
            prepared - began,
            executed - prepared,
            ended - executed,
        )
        if TRACING.enabled:
            _trace(batch, instance, result)
        if self._ordered or self.per_request:
            if cancellation is not None and any(type(a) is StillSending for a in outputs):
                self._sending = [j for j in self._sending if not _all_done(j.batch)]
                self._sending.append(job)
            self._answer_each(requests, outputs)
            return
        for request, answer in zip(requests, outputs, strict=True):
            future = request.payload.future
            if not future.done():  # else the caller went away
                future.set_result(answer)

    def _fail(self, requests: list[PendingRequest], error: BaseException | None) -> None:
        """Answer every request of a batch that failed with ``error``."""
        if not isinstance(error, InferplexError):
            error = ModelExecutionError(f"model '{self.config.name}' failed: {error}")
        for request in requests:
            self.answer(request, None, error)

    def _answer_each(self, requests: list[PendingRequest], outputs: list[BatchOutcome]) -> None:
        """In order (preserve_ordering), or each alone (a per-request backend's errors). A
        request still sending is answered by its stream's final response (core.model)."""
        for request, answer in zip(requests, outputs, strict=True):
            if isinstance(answer, StillSending):
                if self._ordered:  # its place in line passes; its stream's end answers it
                    self._release(request.seq, _nothing)
                continue
            if isinstance(answer, InferplexError):  # a per-request backend failed it alone
                self.answer(request, None, answer)
            else:
                self.answer(request, answer, None)

    def answer(self, request: PendingRequest, outputs: Outputs | None, error: Any) -> None:
        """Answer one request with ``outputs`` or ``error``; with preserve_ordering, not
        before every request that arrived earlier is answered."""
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
        self._release(request.seq, resolve)

    def _release(self, seq: int, resolve: Callable[[], None]) -> None:
        """preserve_ordering: ``resolve`` the answer of request number ``seq`` once every
        earlier one is."""
        self._held[seq] = resolve
        while self._next_seq in self._held:
            self._held.pop(self._next_seq)()
            self._next_seq += 1

    # -- instances -------------------------------------------------------------------------------
    def add_instances(self, backends: list[Backend]) -> None:
        """Put more instances into service (their backends were made off the loop)."""
        for backend in backends:
            instance = self._instance(f"{self.key}#{self._instances_made}", backend)
            self._instances_made += 1
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

    def close(self) -> None:
        """Stop the workers and free the instances (blocking: run it off the loop)."""
        for instance in self.instances:
            instance.close()


def _trace(batch: Batch, instance: ModelInstance, result: _Result) -> None:
    """Record the batch's phases in the trace of each of its requests that has one."""
    _, began, prepared, executed, ended = result
    for request in batch.requests:
        if (trace := request.payload.trace) is not None:
            trace.batch(
                began, prepared, executed, ended, batch.rows, len(batch.requests), instance.label
            )


def _nothing() -> None:
    pass


def _all_done(batch: Batch) -> bool:
    return all(r.payload.future.done() for r in batch.requests)


def _batch_requests(requests: list[PendingRequest]) -> list[BatchRequest]:
    """Who asked for the rows of a batch, for a per-request backend."""
    infos = []
    for pending in requests:
        source = pending.payload.request
        assert source is not None  # set for every request of a per-request model
        infos.append(
            BatchRequest(source.id, dict(source.parameters), pending.rows, pending.payload.sink)
        )
    return infos
