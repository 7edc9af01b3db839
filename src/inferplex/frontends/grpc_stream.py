"""gRPC ``ModelStreamInfer``: a bidirectional stream of inference requests, each answered by
the responses its model sends (a decoupled model's 0..N, an ordinary model's one), as
Triton serves it (docs/streaming.md).

The requests of one stream run at once, up to ``--stream-max-requests`` of them; past that
the stream's messages are not read until one ends, so HTTP/2 flow control holds the client
back. Each response carries its request's id; an error goes in the stream as the message's
``error_message`` (the stream stays open). A request with the parameter
``triton_enable_empty_final_response`` gets ``triton_final_response`` on each response and
an empty final one, as Triton marks the end of a decoupled request. Responses wait in a
small queue for the transport: when the client reads slowly the queue fills, the requests'
response streams stop being read, and their models are held back (``ResponseChannel``).
When the call ends (the client cancels, resets or goes away) every request still running
is cancelled in its model, a slice per turn of the event loop (core/cancelling.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from inferplex.core.cancelling import cancel_in_slices
from inferplex.core.streaming import StreamedResponse
from inferplex.errors import InferplexError
from inferplex.protocol.dataplane import DataPlane
from inferplex.protocol.v2 import offload
from inferplex.protocol.v2.grpc_codec import varint
from inferplex.shm import Regions, SharedMemoryRegistry
from inferplex.types import InferenceRequest, InferenceResponse

#: the request parameter asking for an empty final response, and the response parameter
#: that marks the final one (Triton's names)
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_RESPONSE = "triton_final_response"
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
        ModelStreamInferResponse messages out, as they are ready."""
        out: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(QUEUED_RESPONSES)
        calls = _Calls(self, out, call, self._max_requests)
        reader = asyncio.get_running_loop().create_task(calls.read(requests))
        try:
            while (item := await out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            reader.cancel()
            await calls.cancel()

    async def answer(self, message: Any, call: Any, out: asyncio.Queue[Any]) -> None:
        """One request of the stream: decode, stream its responses into ``out``."""
        plane = self._plane
        shm = self._shm.owned_by(call.identity)  # the caller's regions
        request: InferenceRequest | None = None
        charge = None  # a large message's decoding, charged until its responses are out
        try:
            request = offload.decode_grpc_here(message, shm, plane)
            if request is None:
                charge = plane.charge()
                request = await offload.decode_grpc(message, shm, plane, charge)
            if plane.routing_metadata:
                key = plane.routing_value(call.metadata())
                if key is not None:
                    plane.route(request, key)
            marked = bool(request.parameters.get(EMPTY_FINAL))
            responses = await plane.stream(request)
            try:
                async for item in responses:
                    encoded = await self._encode(item, request, marked, shm)
                    if encoded is not None:
                        await out.put(encoded)
            finally:
                responses.close()
        except InferplexError as exc:
            await out.put(_error(exc, request))
        finally:
            if charge is not None:
                charge.release()

    async def _encode(
        self, item: StreamedResponse, request: InferenceRequest, marked: bool, shm: Regions
    ) -> bytes | None:
        """The ModelStreamInferResponse of one streamed response (None: a final flag alone
        that the client did not ask to see)."""
        if item.error is not None:
            return _error(item.error, request)
        response = item.response
        if response is None:
            if not (marked and item.final):
                return None
            response = InferenceResponse(request.model_name, request.model_version, [])
        response.id = request.id
        if marked:
            response.parameters = {**response.parameters, FINAL_RESPONSE: item.final}
        encoded = offload.encode_grpc_here(response, request, shm)
        if encoded is None:
            encoded = await offload.encode_grpc(response, request, shm)
        return _field(2, encoded)


class _Calls:
    """The requests of one stream while they run (at most ``max_requests``)."""

    def __init__(
        self, infer: StreamInfer, out: asyncio.Queue[Any], call: Any, max_requests: int
    ) -> None:
        self._infer = infer
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
            await self._infer.answer(message, self._call, self._out)
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


def _error(error: InferplexError, request: InferenceRequest | None) -> bytes:
    """A ModelStreamInferResponse with ``error_message``, and the request's id and model in
    its ``infer_response`` where the request was decoded."""
    message = _field(1, error.message.encode())
    if request is None:
        return message
    # ModelInferResponse: model_name = 1, model_version = 2, id = 3
    head = _field(1, request.model_name.encode()) + _field(2, request.model_version.encode())
    return message + _field(2, head + _field(3, request.id.encode()))


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    if not value:
        return b""
    return varint(number << 3 | 2) + varint(len(value)) + value
