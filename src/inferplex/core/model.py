"""ModelVersion: one loaded version of a model, as the data path calls it — validation, the
response cache and answering ``infer`` — over three parts of its own: its queue
(:class:`~inferplex.core.queueing.VersionQueue`, what the dispatcher drives), its execution
(:class:`~inferplex.core.execution.VersionExecution`: instances, running batches) and its
statistics (:class:`~inferplex.core.stats.ModelStats`)."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from inferplex.backends.base import Backend
from inferplex.config.model_config import ModelConfig
from inferplex.core.cache import ResponseCache
from inferplex.core.estimator import ExecutionEstimator
from inferplex.core.execution import Outputs, VersionExecution
from inferplex.core.queueing import VersionQueue
from inferplex.core.sequences import SequenceBatcher
from inferplex.core.stats import ModelStats
from inferplex.core.streaming import DEFAULT_BOUND, ResponseChannel, ResponseStream
from inferplex.core.validation import RequestValidator
from inferplex.errors import (
    InferplexError,
    ModelExecutionError,
    ModelNotReadyError,
    UnsupportedError,
)
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

#: the queue is swept of cancelled requests once they are at least 1/SWEEP_SHARE of it
SWEEP_SHARE = 8

if TYPE_CHECKING:
    from inferplex.core.dispatcher import Dispatcher
    from inferplex.core.instance import ModelInstance

_now_ns = time.perf_counter_ns


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
        *,
        sequence_backlog: int = 1024,
        initial_states: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.config = config
        self.version = version
        self.version_str = str(version)
        # unique among the versions alive at once (a reload runs a replacement beside the old)
        self.key = key or f"{config.name}/{version}"
        self._stats = ModelStats(config.name, self.version_str)
        self.estimator = ExecutionEstimator()
        self.execution = VersionExecution(
            config, version, self.key, backends, loop, dispatcher, self._stats, self.estimator
        )
        #: what the dispatcher registers and drives (``dispatcher.add(version.queueing, ...)``)
        self.queueing = VersionQueue(
            config, self.key, self.execution, loop, dispatcher, self.estimator
        )
        self._submit = self.queueing.submit
        #: the batch queue; the instances, and those idle (the execution's own objects)
        self.queue = self.queueing.queue
        self.instances: list[ModelInstance] = self.execution.instances
        self.idle: list[ModelInstance] = self.execution.idle
        self.composite = self.execution.composite
        self._validator = RequestValidator(config)
        self._batched = config.batched
        #: sends 0..N responses per request (``stream``); a unary call takes exactly one
        self.decoupled = config.model_transaction_policy.decoupled
        self._bytes_outputs = frozenset(t.name for t in config.output if t.data_type == "BYTES")
        # per output: (datatype, the shape it is reshaped to for the client, or None)
        self._output_specs = {
            t.name: (t.data_type, None if t.reshape is None else tuple(t.dims))
            for t in config.output
        }
        self._loop = loop
        self._cache = cache if config.response_cache.enable else None
        #: a stateful model's sequences (Triton's sequence_batching)
        self.sequences: SequenceBatcher | None = None
        if config.sequence_batching is not None:
            self.sequences = SequenceBatcher(
                config,
                config.sequence_batching,
                len(backends),
                loop,
                sequence_backlog,
                initial_states or {},
            )
        self._in_flight = 0
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._closing = False
        self._withdraw_queued = False
        self._unswept = 0  # requests cancelled since the last sweep of the queue

    @property
    def stats(self) -> ModelStats:
        """The version's counters (``statistics``, the metrics)."""
        return self._stats

    @stats.setter
    def stats(self, stats: ModelStats) -> None:
        """Count on in ``stats`` (a reload keeps the counters of the version it replaces)."""
        self._stats = self.execution.stats = stats

    @property
    def precedence(self) -> int:
        """The highest pipeline-step precedence among the queued requests (0: none queued)."""
        return self.queueing.precedence

    # -- requests -----------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self.decoupled:
            return await self._one_response(request)
        if self._closing:
            raise self._unloading()
        start = _now_ns()
        if not self._in_flight:
            self._idle_event.clear()
        self._in_flight += 1
        ok = False
        try:
            feeds, rows = self._validator.feeds(request)
            names = self._validator.output_names(request)
            if self.sequences is not None:
                results = await self._sequence_results(request, feeds, rows, names, start)
            elif self._cache is not None:
                results = await self._cached_results(request, feeds, rows, names, start)
            else:
                shape_key = self._validator.shape_key(feeds) if self._batched else None
                results = await self._submit(request, feeds, rows, shape_key, names, start)
            response = self._response(request.id, names, results)
            ok = True
            return response
        except asyncio.CancelledError:
            # the caller went away (a reset stream, a closed connection): its queued request
            # leaves the queue, so nothing runs for it and it holds no place in line; a
            # handler already running it is told
            self._stats.cancelled += 1
            self._withdraw_cancelled()
            raise
        finally:
            self._stats.record_request(ok, _now_ns() - start)
            self._in_flight -= 1
            if not self._in_flight:
                self._idle_event.set()

    def _unloading(self) -> ModelNotReadyError:
        return ModelNotReadyError(f"model '{self.config.name}' version {self.version} is unloading")

    def _response(self, request_id: str, names: list[str], results: Outputs) -> InferenceResponse:
        """The response of ``results``, its outputs in the order asked (``names``, those it
        has), shaped as declared."""
        specs = self._output_specs
        outputs = []
        for name in names:
            data = results.get(name)
            if data is None:  # a decoupled model's response may carry some outputs only
                continue
            datatype, dims = specs[name]
            if dims is not None:
                data = data.reshape((data.shape[0], *dims) if self._batched else dims)
            outputs.append(Tensor(name, datatype, data.shape, data))
        return InferenceResponse(self.config.name, self.version_str, outputs, request_id)

    # -- decoupled models: 0..N responses per request -----------------------------------------
    def stream(self, request: InferenceRequest, bound: int = DEFAULT_BOUND) -> ResponseStream:
        """Queue a decoupled model's request; its responses come through the stream as the
        model sends them (at most ``bound`` waiting for the reader: the model waits beyond).
        InferplexError at once for a request the model cannot take."""
        if self._closing:
            raise self._unloading()
        start = _now_ns()
        feeds, rows = self._validator.feeds(request)
        names = self._validator.output_names(request)
        shape_key = self._validator.shape_key(feeds) if self._batched else None
        channel = ResponseChannel(self._loop, names, self._bytes_outputs, bound)
        future = self._submit(request, feeds, rows, shape_key, names, start, channel)
        if not self._in_flight:
            self._idle_event.clear()
        self._in_flight += 1
        future.add_done_callback(functools.partial(self._stream_ended, channel, start))

        def closed(finished: bool) -> None:
            if future.done():
                return
            if finished:  # its final response was read: the request is over (its batch may
                # have ended before, the model's threads sending on: STILL_SENDING)
                future.set_result({})
                return
            future.cancel()  # the reader went away: so does the request
            self._stats.cancelled += 1
            self._withdraw_cancelled()

        respond = functools.partial(self._response, request.id, names)
        return ResponseStream(channel, respond, closed)

    def _stream_ended(
        self, channel: ResponseChannel, start: int, future: asyncio.Future[Outputs]
    ) -> None:
        """A decoupled request ended (its batch, or its final response was read): the model
        holds it no more."""
        error = None if future.cancelled() else future.exception()
        if error is not None and not isinstance(error, InferplexError):
            error = ModelExecutionError(f"model '{self.config.name}' failed: {error}")
        channel.end(error)
        self._stats.record_request(error is None and not future.cancelled(), _now_ns() - start)
        self._in_flight -= 1
        if not self._in_flight:
            self._idle_event.set()

    async def _one_response(self, request: InferenceRequest) -> InferenceResponse:
        """A decoupled model asked for one response (a unary call): the one it sends, else an
        error that says to stream."""
        stream = self.stream(request)
        responses: list[InferenceResponse] = []
        try:
            async for item in stream:
                if item.error is not None:
                    raise item.error
                if item.response is not None:
                    responses.append(item.response)
        finally:
            stream.close()
        if len(responses) != 1:
            raise UnsupportedError(
                f"model '{self.config.name}' is decoupled and sent {len(responses)} responses "
                "to this request; a unary call takes exactly one (read them all with gRPC "
                "ModelStreamInfer or HTTP generate_stream)"
            )
        return responses[0]

    async def _sequence_results(
        self,
        request: InferenceRequest,
        feeds: dict[str, np.ndarray],
        rows: int,
        outputs: list[str],
        start: int,
    ) -> Outputs:
        """The outputs of one request of a sequence, with the inputs the server fills."""
        assert self.sequences is not None

        def submit(
            step: dict[str, np.ndarray], names: list[str], lane: int
        ) -> asyncio.Future[Outputs]:
            # the shape key counts the server's inputs too (a state may change its shape)
            shape_key = tuple((n, a.shape[1:]) for n, a in step.items()) if self._batched else None
            return self._submit(request, step, rows, shape_key, names, start, lane=lane)

        return await self.sequences.run(request, feeds, rows, outputs, submit)

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
        self._stats.record_cache(cached is not None, _now_ns() - looked)
        if cached is not None:
            return cached
        shape_key = self._validator.shape_key(feeds) if self._batched else None
        results = await self._submit(request, feeds, rows, shape_key, outputs, start)
        self._cache.put(cache_key, results)
        return results

    def _withdraw_cancelled(self) -> None:
        """Take the requests whose callers were cancelled out of the queue, and tell the
        running batches that hold others, once for all those cancelled in this turn of the
        event loop."""
        self._unswept += 1
        if not self._withdraw_queued:
            self._withdraw_queued = True
            self._loop.call_soon(self._withdraw)

    def _withdraw(self) -> None:
        self._withdraw_queued = False
        # A sweep of the queue costs O(queue): it runs once the cancelled requests are a
        # share of it, so that its cost per cancelled request stays constant (a dropped
        # connection's thousands of requests, cancelled a slice per turn, made a sweep of
        # the whole queue in every turn). Until then a cancelled request stays in line; if
        # its batch comes first, its answer goes to nobody.
        if self._unswept * SWEEP_SHARE >= self.queue.pending_requests:
            self._unswept = 0
            self.queueing.withdraw()
        self.execution.cancel_gone()

    def statistics(self) -> dict[str, Any]:
        """Triton's statistics of this version, plus why its batches closed and how many
        requests were cancelled (their callers went away); a sequence model's sequences."""
        statistics = self._stats.statistics(self.queue.close_reasons)
        if self.sequences is not None:
            statistics["sequence_stats"] = self.sequences.statistics()
        return statistics

    # -- life cycle ----------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Requests accepted and not answered yet."""
        return self._in_flight

    def add_instances(self, backends: list[Backend]) -> None:
        """Put more instances into service (their backends were made off the loop)."""
        self.execution.add_instances(backends)

    def retire_instances(self, count: int) -> asyncio.Future[list[ModelInstance]]:
        """Take ``count`` instances out of service: idle ones now, busy ones as soon as their
        batch ends (in-flight work is unaffected). The future gives the retired instances,
        to be closed off the loop. One retirement at a time; at least one instance stays."""
        return self.execution.retire_instances(count)

    async def drain(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait until every accepted one is answered."""
        self._closing = True
        await asyncio.wait_for(self._idle_event.wait(), timeout)

    def close(self) -> None:
        """Stop the workers and free the instances (blocking: run it off the loop)."""
        self.execution.close()
