"""EngineStream: a backend's thread reading the responses of a call to another served model as
the model sends them (a handler calling a decoupled model, Triton's ``exec(decoupled=True)``).

The stream itself lives on the event loop (the engine's :class:`~inferplex.core.streaming`
response stream, bounded by ``--stream-queue-responses``); the thread asks for one response
at a time. The next one is fetched on the loop while the reader handles the last, so a
reader costs the model at most one response of look-ahead, and a reader that stops asking
holds the model back at the channel's bound. ``close`` from any thread stops the call: the
model's request is cancelled (a running Python model sees ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from inferplex.backends.base import CalledResponse, CallStopped
from inferplex.core.streaming import Responses, StreamedResponse
from inferplex.errors import DeadlineExceededError, InferplexError, ModelExecutionError
from inferplex.types import InferenceRequest

Open = Callable[[InferenceRequest], Coroutine[Any, Any, Responses]]


class EngineStream:
    """One streamed call, started at once on the loop; read with ``next`` from one thread."""

    def __init__(
        self, open_stream: Open, request: InferenceRequest, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._loop = loop
        self._model = request.model_name
        self._stream: Responses | None = None
        self._closed = False
        #: the fetch of the next response (None after the final one)
        self._next: concurrent.futures.Future[StreamedResponse] | None = (
            asyncio.run_coroutine_threadsafe(self._open(open_stream, request), loop)
        )
        #: the last fetch started, kept for ``close`` to cancel (``_next`` is cleared first)
        self._fetching = self._next

    async def _open(self, open_stream: Open, request: InferenceRequest) -> StreamedResponse:
        self._stream = await open_stream(request)
        if self._closed:  # closed while it opened (its model loading, say): stop it now
            self._stream.close()
        return await self._fetch()

    async def _fetch(self) -> StreamedResponse:
        assert self._stream is not None
        item = await anext(self._stream, None)
        # a stream that ends without a final response ended its request: that is the end
        return StreamedResponse(None) if item is None else item

    def next(self, timeout: float | None) -> CalledResponse:
        fetching = self._next
        if fetching is None:
            return CalledResponse(None, CallStopped("the call has no more responses"))
        try:
            item = fetching.result(timeout)
        except TimeoutError:
            self.close()
            error: InferplexError = DeadlineExceededError(
                f"model '{self._model}' did not answer in time"
            )
            return self._last(error)
        except concurrent.futures.CancelledError:
            return self._last(self._stopped())
        except InferplexError as exc:  # the call could not start (an unknown model, say)
            return self._last(exc)
        except Exception as exc:
            return self._last(ModelExecutionError(f"calling model '{self._model}' failed: {exc}"))
        if self._closed:  # what a stopped stream ends with is no answer of the model's
            return self._last(self._stopped())
        if item.final:
            self._next = None
        else:  # look one ahead while the reader handles this one
            self._next = asyncio.run_coroutine_threadsafe(self._fetch(), self._loop)
            self._fetching = self._next
        outputs = None
        if item.response is not None:
            outputs = {t.name: t.data for t in item.response.outputs}
        return CalledResponse(outputs, item.error, item.final)

    def _stopped(self) -> CallStopped:
        return CallStopped(f"the call to model '{self._model}' was cancelled")

    def _last(self, error: InferplexError) -> CalledResponse:
        self._next = None
        return CalledResponse(None, error, True)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        """On the loop: end the fetch in flight (a reader waiting on an ordinary model's
        answer wakes), then the stream (its request is withdrawn or told it is cancelled;
        one still opening is stopped by ``_open``)."""
        self._fetching.cancel()
        if self._stream is not None:
            self._stream.close()
