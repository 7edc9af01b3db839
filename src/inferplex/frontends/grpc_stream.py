"""gRPC ``ModelStreamInfer``: a bidirectional stream of inference requests, each answered by
the responses its model sends (a decoupled model's 0..N, an ordinary model's one), as
Triton serves it (docs/streaming.md).

The requests of one stream run at once, up to ``--stream-max-requests`` of them; past that
the stream's messages are not read until one ends, so HTTP/2 flow control holds the client
back. Each request is one ``DataPlane.stream`` call with the stream codec
(``protocol/v2/codecs.py``): its responses carry its id, an error goes in the stream as the
message's ``error_message`` (the stream stays open), classification, circuit breakers and
tracing (a span per request) are as for ModelInfer. The call's ``grpc-timeout`` is its
deadline, as for a unary call: when it passes the call ends with DEADLINE_EXCEEDED (its
status, as gRPC servers and Triton end it) and every request still running is cancelled in
its model. Responses wait in a
small queue for the transport: when the client reads slowly the queue fills, the requests'
response streams stop being read, and their models are held back (``ResponseChannel``).
When the call ends (the client cancels, resets or goes away) every request still running
is cancelled in its model, a slice per turn of the event loop (core/cancelling.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from inferplex.core.cancelling import cancel_in_slices
from inferplex.dataplane import CallMeta, DataPlane, Streamed
from inferplex.dataplane.streams import deadline_error
from inferplex.errors import DeadlineExceededError, InferplexError
from inferplex.protocol.v2.codecs import GRPC_STREAM, stream_error
from inferplex.shm import SharedMemoryRegistry
from inferplex.tracing.context import TRACING, CallTrace
from inferplex.transport.grpc_call import timeout_seconds

#: encoded responses waiting for the transport to take them (a slow reader fills it)
QUEUED_RESPONSES = 8


class StreamInfer:
    """``ModelStreamInfer`` over the data plane; ``serve`` is the streaming method."""

    def __init__(self, plane: DataPlane, shm: SharedMemoryRegistry, max_requests: int) -> None:
        self._plane = plane
        self._shm = shm
        self._max_requests = max_requests

    async def serve(self, requests: AsyncIterator[Any], call: Any) -> AsyncIterator[bytes]:
        """The call: its request messages (ModelInferRequest bytes) in, the
        ModelStreamInferResponse messages out, as they are ready; at its deadline it ends
        with DEADLINE_EXCEEDED, what still runs cancelled."""
        deadline = call_deadline(call)
        out: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(QUEUED_RESPONSES)
        calls = _Calls(self, out, call, self._max_requests, deadline)
        reader = asyncio.get_running_loop().create_task(calls.read(requests))
        try:
            while True:
                if deadline is None:
                    item = await out.get()
                else:
                    try:
                        async with asyncio.timeout_at(deadline):
                            item = await out.get()
                    except TimeoutError:
                        raise deadline_error("") from None
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.cancel()
            await calls.cancel()

    async def answer(
        self, message: Any, call: Any, out: asyncio.Queue[Any], deadline: float | None
    ) -> None:
        """One request of the stream: its responses into ``out`` as the data plane streams
        them; an error as the stream's message, but the call's deadline, which ends it."""
        plane = self._plane
        meta = CallMeta(
            regions=self._shm.owned_by(call.identity),  # the caller's regions
            routing_key=plane.routing_value(call.metadata()) if plane.routing_metadata else None,
            deadline=deadline,
            trace=call_trace(call) if TRACING.enabled else None,
        )
        streamed: Streamed[None, bytes] | None = None
        try:
            streamed = await plane.stream(GRPC_STREAM, message, meta)
            async for encoded in streamed:
                await out.put(encoded)
        except DeadlineExceededError as exc:
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                await out.put(exc)  # the call's own: it ends the call
            else:
                await out.put(stream_error(exc, None if streamed is None else streamed.request))
        except InferplexError as exc:
            await out.put(stream_error(exc, None if streamed is None else streamed.request))
        finally:
            if streamed is not None:
                streamed.close()


def call_deadline(call: Any) -> float | None:
    """The event loop's time at which a call's ``grpc-timeout`` passes (None: it has none,
    or the server enforces it itself and keeps it from the metadata, as grpcio does)."""
    for key, value in call.metadata():
        if key == "grpc-timeout" and isinstance(value, str):
            seconds = timeout_seconds(value.encode("latin-1"))
            if seconds is not None:
                return asyncio.get_running_loop().time() + seconds
    return None


def call_trace(call: Any) -> CallTrace:
    """The trace context a gRPC call came with (its W3C metadata), read while tracing is on."""
    carrier = {
        key: value
        for key, value in call.metadata()
        if key in ("traceparent", "tracestate") and isinstance(value, str)
    }
    return CallTrace(carrier, time.perf_counter_ns())


class _Calls:
    """The requests of one stream while they run (at most ``max_requests``)."""

    def __init__(
        self,
        infer: StreamInfer,
        out: asyncio.Queue[Any],
        call: Any,
        max_requests: int,
        deadline: float | None,
    ) -> None:
        self._infer = infer
        self._deadline = deadline
        self._out = out
        self._call = call
        self._slots = asyncio.Semaphore(max_requests)
        self._running: set[asyncio.Task[None]] = set()
        self._all_ended: asyncio.Future[None] | None = None  # set by ``cancel``

    async def read(self, requests: AsyncIterator[Any]) -> None:
        """Start each request as it arrives, when a slot is free; once the client has sent
        its last, wait for them all and end the call."""
        loop = asyncio.get_running_loop()
        try:
            async for message in requests:
                await self._slots.acquire()  # a full stream stops reading its messages
                task = loop.create_task(self._one(message))
                self._running.add(task)
                task.add_done_callback(self._ended)
            while self._running:
                await asyncio.wait(set(self._running))
        except Exception as exc:  # the transport refused a message (too large, ...)
            await self._out.put(exc)
            return
        await self._out.put(None)

    async def _one(self, message: Any) -> None:
        try:
            await self._infer.answer(message, self._call, self._out, self._deadline)
        finally:
            self._slots.release()

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        ended = self._all_ended
        if not self._running and ended is not None and not ended.done():
            ended.set_result(None)

    async def cancel(self) -> None:
        """The call ended: cancel what still runs (each tells its model), a slice per turn
        of the event loop (a dropped connection may end a thousand streams at once), and
        wait for them to end (one future, not a callback more per request)."""
        if not self._running:
            return
        self._all_ended = asyncio.get_running_loop().create_future()
        cancel_in_slices(list(self._running))
        await self._all_ended
