"""ModelVersion: one loaded version of a model — validation, its batch queue, its instances,
running batches (concatenate, execute, split) and answering every request exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.backends.base import Backend
from inferplex.config.model_config import ModelConfig
from inferplex.core.batcher import Batch, DynamicBatcher, PendingRequest
from inferplex.core.cache import ResponseCache
from inferplex.core.datatypes import to_bytes_elements
from inferplex.core.estimator import ExecutionEstimator
from inferplex.core.fifo import FifoQueue
from inferplex.core.instance import ModelInstance
from inferplex.core.stats import ExecutionTimes, ModelStats
from inferplex.core.types import InferenceRequest, InferenceResponse, Parameters, Tensor
from inferplex.core.validation import RequestValidator
from inferplex.errors import (
    DeadlineExceededError,
    InferplexError,
    InvalidInputError,
    ModelExecutionError,
    ModelNotReadyError,
)

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


@dataclass(slots=True)
class _BatchResult:
    outputs: list[Outputs]  # one per request, in batch order
    times: ExecutionTimes
    began_ns: int  # when the worker took the batch: ends each request's queue time
    infer_s: float


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
    ) -> None:
        self.config = config
        self.version = version
        self.version_str = str(version)
        self.key = f"{config.name}/{version}"
        self.stats = ModelStats(config.name, self.version_str)
        self.estimator = ExecutionEstimator()
        self.queue: DynamicBatcher | FifoQueue
        batching = config.dynamic_batching
        if batching is not None and config.batched:
            self.queue = DynamicBatcher(
                config.name, config.max_batch_size, batching, self.estimator.estimate
            )
        else:
            self.queue = FifoQueue()
        self.instances = [
            ModelInstance(f"{self.key}#{i}", backend, loop) for i, backend in enumerate(backends)
        ]
        self.idle = list(self.instances)
        self._validator = RequestValidator(config)
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

    # -- requests -----------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self._closing:
            raise ModelNotReadyError(
                f"model '{self.config.name}' version {self.version} is unloading"
            )
        start = _now_ns()
        self._in_flight += 1
        self._idle_event.clear()
        ok = False
        try:
            feeds, rows = self._validator.feeds(request)
            outputs = self._validator.output_names(request)
            results = await self._results(request, feeds, rows, outputs, start)
            response = InferenceResponse(
                model_name=self.config.name,
                model_version=self.version_str,
                outputs=[self._output_tensor(name, results[name]) for name in outputs],
                id=request.id,
            )
            ok = True
            return response
        finally:
            self.stats.record_request(ok, _now_ns() - start)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle_event.set()

    async def _results(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        outputs: list[str],
        start: int,
    ) -> Outputs:
        """The outputs, from the response cache or from a queued batch."""
        cache_key = None
        if self._cache is not None:
            looked = _now_ns()
            cache_key = self._cache.key(self.key, feeds, outputs)
            cached = self._cache.get(cache_key)
            self.stats.record_cache(cached is not None, _now_ns() - looked)
            if cached is not None:
                return cached
        priority, timeout_us = _scheduling_parameters(request.parameters)
        future: asyncio.Future[Outputs] = self._loop.create_future()
        shape_key = (
            tuple((name, array.shape[1:]) for name, array in feeds.items())
            if self.config.batched
            else None
        )
        payload = _Payload(feeds, outputs, future, start)
        pending = PendingRequest(rows, shape_key, start * 1e-9, priority, timeout_us, payload)
        self.queue.submit(pending, start * 1e-9)
        self._dispatcher.arrived(self)
        results = await future
        if cache_key is not None and self._cache is not None:
            self._cache.put(cache_key, results)
        return results

    def _output_tensor(self, name: str, data: np.ndarray) -> Tensor:
        spec = self._validator.output_spec(name)
        if spec.reshape is not None:
            shape = (data.shape[0], *spec.dims) if self.config.batched else spec.dims
            data = data.reshape(shape)
        return Tensor(name, spec.data_type, data.shape, data)

    # -- batches: called by the dispatcher -------------------------------------------------------
    def launch(self, batch: Batch, ticket: Ticket) -> None:
        """Run ``batch`` on an idle instance (the dispatcher checked there is one)."""
        instance = self.idle.pop()
        started = _now()

        def done(result: _BatchResult | None, error: BaseException | None) -> None:
            self.idle.append(instance)
            self._finish(batch, ticket, started, result, error)

        instance.run(lambda backend: self._run(backend, batch), done)

    def _run(self, backend: Backend, batch: Batch) -> _BatchResult:
        """Runs in the instance's worker thread: concatenate, execute, split."""
        began = _now_ns()
        requests = batch.requests
        first: _Payload = requests[0].payload
        if len(requests) == 1:
            feeds, wanted = first.feeds, first.outputs
        else:
            payloads: list[_Payload] = [r.payload for r in requests]
            feeds = {
                name: np.concatenate([p.feeds[name] for p in payloads]) for name in first.feeds
            }
            names = {n for p in payloads for n in p.outputs}
            wanted = [t.name for t in self.config.output if t.name in names]
        prepared = _now_ns()
        try:
            results = backend.execute(feeds, wanted)
        except InferplexError:
            raise
        except Exception as exc:
            raise ModelExecutionError(
                f"model '{self.config.name}' version {self.version} failed: {exc}"
            ) from exc
        executed = _now_ns()
        for name in wanted:
            if self._validator.output_spec(name).data_type == "BYTES":
                results[name] = to_bytes_elements(results[name])
        outputs = [results] if len(requests) == 1 else self._split(results, batch)
        return _BatchResult(
            outputs,
            ExecutionTimes(
                compute_input_ns=prepared - began,
                compute_infer_ns=executed - prepared,
                compute_output_ns=_now_ns() - executed,
            ),
            began,
            (executed - prepared) * 1e-9,
        )

    def _split(self, results: Outputs, batch: Batch) -> list[Outputs]:
        for name, array in results.items():
            if array.ndim == 0 or array.shape[0] != batch.rows:
                raise ModelExecutionError(
                    f"model '{self.config.name}' output '{name}' has shape {list(array.shape)}; "
                    f"a batched model must return {batch.rows} rows, one per input row"
                )
        split: list[Outputs] = []
        offset = 0
        for request in batch.requests:
            end = offset + request.rows
            split.append({name: results[name][offset:end] for name in request.payload.outputs})
            offset = end
        return split

    def _finish(
        self,
        batch: Batch,
        ticket: Ticket,
        started: float,
        result: _BatchResult | None,
        error: BaseException | None,
    ) -> None:
        now = _now()
        latencies = [now - r.arrival for r in batch.requests]
        self._dispatcher.finished(self, ticket, now, latencies)
        if result is None:
            if not isinstance(error, InferplexError):
                error = ModelExecutionError(f"model '{self.config.name}' failed: {error}")
            for request in batch.requests:
                self._answer(request, None, error)
            return
        self.estimator.observe(batch.rows, result.infer_s)
        queue_ns = [result.began_ns - r.payload.enqueued_ns for r in batch.requests]
        self.stats.record_batch(batch.rows, result.times, queue_ns)
        for request, outputs in zip(batch.requests, result.outputs, strict=True):
            self._answer(request, outputs, None)

    def fail_expired(self, requests: list[PendingRequest]) -> None:
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
        """Triton's statistics of this version, plus why its batches closed."""
        stats = self.stats.to_dict()
        stats["batch_close_reasons"] = {str(k): n for k, n in self.queue.close_reasons.items()}
        return stats

    # -- life cycle ----------------------------------------------------------------------------
    async def drain(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait until every accepted one is answered."""
        self._closing = True
        await asyncio.wait_for(self._idle_event.wait(), timeout)

    def close(self) -> None:
        """Stop the workers and free the instances (blocking: run it off the loop)."""
        for instance in self.instances:
            instance.close()


def _scheduling_parameters(parameters: Parameters) -> tuple[int, int]:
    """The V2 request parameters ``priority`` and ``timeout`` (microseconds)."""
    if not parameters:
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
