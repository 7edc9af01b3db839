"""One streamed call as the data plane hands it to its frontend: the codec's ``head``, then
each response (or error) the model sends, classified where the request asked for classes,
encoded by the codec's per-request encoder (a large one in a worker thread), within the
call's deadline; ``close`` (or the end) tells the model, releases the call's byte charge and
ends its span."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from inferplex.core.streaming import Responses, StreamedResponse
from inferplex.dataplane.classes import Classes
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.dataplane.codec import ItemEncoder
from inferplex.dataplane.offload import small_response
from inferplex.dataplane.spans import TracedCall
from inferplex.errors import DeadlineExceededError, InferplexError
from inferplex.security.charges import Charge
from inferplex.types import InferenceRequest

__all__ = ["Failed", "Streamed", "deadline_error"]

H = TypeVar("H")
I = TypeVar("I")  # noqa: E741 (an item)


#: what a stream that ended without a final response ends with: a final flag alone
_ENDED = StreamedResponse(None, None, True)


def deadline_error(model: str) -> DeadlineExceededError:
    """The error of a call whose deadline (gRPC's ``grpc-timeout``) passed."""
    where = f" of model '{model}'" if model else ""
    return DeadlineExceededError(
        f"the call's deadline passed before the request{where} was answered (grpc-timeout); "
        "the request was cancelled"
    )


class Failed:
    """The responses of a request the engine refused: its error, final."""

    def __init__(self, error: InferplexError) -> None:
        self._error: InferplexError | None = error

    def __aiter__(self) -> Failed:
        return self

    async def __anext__(self) -> StreamedResponse:
        error, self._error = self._error, None
        if error is None:
            raise StopAsyncIteration
        return StreamedResponse(None, error)

    def close(self) -> None:
        self._error = None


class Streamed(Generic[H, I]):
    """The encoded responses of one request (``async for``); ``head`` is the codec's answer
    to the first, ready once the data plane hands it out."""

    __slots__ = (
        "_charge",
        "_classes",
        "_classified",
        "_deadline",
        "_done",
        "_encoder",
        "_ended",
        "_error",
        "_first",
        "_responses",
        "_traced",
        "head",
        "request",
    )

    def __init__(
        self,
        classes: Classes,
        request: InferenceRequest,
        responses: Responses,
        encoder: ItemEncoder[H, I],
        charge: Charge | None,
        traced: TracedCall | None,
        deadline: float | None,
    ) -> None:
        self._classes = classes
        self.request = request
        self._responses = responses
        self._encoder = encoder
        self._charge = charge
        self._traced = traced
        self._deadline = deadline
        self._classified = type(request.outputs) is ClassifiedOutputs
        self._first: StreamedResponse | None = None
        self._done = False  # the final response was taken
        self._ended = False  # closed: nothing more comes
        self._error: BaseException | None = None  # the last error, for the span

    async def open(self) -> None:
        """Take the first response and make the head of it (closed if that fails)."""
        try:
            self._first = await self._next()
            self.head: H = self._encoder.head(self._first)
        except BaseException as exc:
            self._close(exc)
            raise

    def __aiter__(self) -> Streamed[H, I]:
        return self

    async def __anext__(self) -> I:
        try:
            while not self._ended:
                if self._first is not None:
                    item, self._first = self._first, None
                elif self._done:
                    last = self._encoder.end()
                    self._close(self._error)
                    if last is not None:
                        return last
                    break
                else:
                    item = await self._next()
                if item.final:
                    self._done = True
                if item.error is not None:
                    self._error = item.error
                encoded = await self._encode(item)
                if encoded is not None:
                    return encoded
        except BaseException as exc:
            self._close(exc)
            raise
        raise StopAsyncIteration

    def close(self) -> None:
        """The reader leaves before the end: the model is told (its request cancelled)."""
        self._close(self._error)

    async def _next(self) -> StreamedResponse:
        """The model's next response, classified where asked, within the deadline."""
        if self._deadline is None:
            item = await anext(self._responses, _ENDED)
        else:
            try:
                async with asyncio.timeout_at(self._deadline):
                    item = await anext(self._responses, _ENDED)
            except TimeoutError:
                raise deadline_error(self.request.model_name) from None
        if self._classified and item.response is not None:
            response = await self._classes.classify(self.request, item.response)
            item = StreamedResponse(response, item.error, item.final)
        return item

    async def _encode(self, item: StreamedResponse) -> I | None:
        if item.response is None or small_response(item.response):
            return self._encoder.item(item)
        return await asyncio.to_thread(self._encoder.item, item)

    def _close(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._first = None
        self._responses.close()
        if self._charge is not None:
            self._charge.release()
        if self._traced is not None:
            self._traced.end(error)
