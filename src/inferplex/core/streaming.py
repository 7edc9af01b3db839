"""Streams of responses: one request, zero or more responses (a decoupled model's), read on
the event loop as they are sent from an instance's thread.

A :class:`ResponseChannel` is the hand-off. The backend sends into it from the instance's
thread (``send``, the :class:`~inferplex.backends.base.ResponseSink` of the request); the
reader takes on the event loop. It holds at most ``bound`` responses: a sender finding it
full waits in its own thread until the reader takes some, so a slow reader holds the model
back instead of growing the server's memory (the bound is ``--stream-queue-responses``).
The sender wakes the reader with one ``call_soon_threadsafe`` when the channel goes from
empty to not empty, and the reader takes everything waiting at once: responses sent while
the loop is busy cost one wake-up together, and nothing on the loop walks them one lock at a
time.

A :class:`ResponseStream` is what the engine hands a frontend: an async iterator of
:class:`StreamedResponse` (each a response, or an error the model sent, and whether it is
the last), which the frontend ``close``s when its client goes away (the model is told:
its queued request is withdrawn, a running one sees ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from inferplex.backends.base import RequestOutcome
from inferplex.datatypes import to_bytes_elements
from inferplex.errors import InferplexError
from inferplex.types import InferenceResponse

#: the default of ``--stream-queue-responses``
DEFAULT_BOUND = 16


@dataclass(slots=True)
class StreamedResponse:
    """One response of a stream: outputs (``response``), or an ``error`` the model sent or
    that ended the request, or neither (a final flag alone, Triton's empty final response).
    ``final``: nothing follows it."""

    response: InferenceResponse | None
    error: InferplexError | None = None
    final: bool = True


class _Item(NamedTuple):
    """What the sender puts in."""

    outcome: RequestOutcome | None
    """outputs, or an error, or None (a final flag alone)"""
    final: bool


class ResponseChannel:
    """A bounded hand-off of one request's responses from a sending thread to the event loop
    (see the module docstring). The sender's side is ``send``; the loop's ``take``/``end``/
    ``close``."""

    __slots__ = (
        *("_bound", "_bytes", "_closed", "_cond", "_ended", "_items", "_loop", "_outputs"),
        "_waiter",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        outputs: list[str],
        bytes_outputs: frozenset[str] = frozenset(),
        bound: int = DEFAULT_BOUND,
    ) -> None:
        """``outputs``: what the request asked for (a response keeps those it has);
        ``bytes_outputs``: the model's BYTES outputs, made arrays of ``bytes`` by the
        sender."""
        self._loop = loop
        self._outputs = outputs
        self._bytes = bytes_outputs
        self._bound = max(1, bound)
        self._items: deque[_Item] = deque()
        self._cond = threading.Condition(threading.Lock())
        #: the reader's future while it waits on an empty channel (set and cleared under the
        #: lock; the sender wakes it once)
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False  # the reader went away: what is sent now is dropped
        #: the request's batch ended (None) or failed (the error): nothing more will be sent
        self._ended: tuple[InferplexError | None] | None = None

    # -- the sender's side (an instance's thread) ------------------------------------------------
    def send(self, outcome: RequestOutcome | None, final: bool) -> bool:
        """Queue one response; waits while the channel is full. False once the reader went
        away (the response is dropped, and so will be those after it)."""
        if isinstance(outcome, dict):  # in the sender's thread: the work in proportion
            outcome = {
                name: to_bytes_elements(outcome[name]) if name in self._bytes else outcome[name]
                for name in self._outputs
                if name in outcome
            }
        with self._cond:
            while len(self._items) >= self._bound and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._items.append(_Item(outcome, final))
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)
        return True

    @property
    def closed(self) -> bool:
        """Whether the reader went away (a sender may stop early)."""
        return self._closed

    # -- the reader's side (the event loop) --------------------------------------------------
    async def take(self) -> list[_Item]:
        """Everything sent and not yet taken (at least one item), or [] once the batch
        ended with nothing left to take (``ended`` says how)."""
        while True:
            with self._cond:
                if self._items:
                    items = list(self._items)
                    self._items.clear()
                    self._cond.notify_all()  # a sender may wait for room
                    return items
                if self._ended is not None or self._closed:
                    return []
                waiter = self._waiter = self._loop.create_future()
            await waiter

    @property
    def ended(self) -> InferplexError | None:
        """The error the request's batch failed with (None if it did not, or has not
        ended)."""
        return None if self._ended is None else self._ended[0]

    def end(self, error: InferplexError | None) -> None:
        """The request's batch ended (with ``error`` if it failed): nothing more comes."""
        with self._cond:
            self._ended = (error,)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            _wake(waiter)

    def close(self) -> None:
        """The reader went away: a waiting sender returns, later sends are dropped."""
        with self._cond:
            self._closed = True
            self._items.clear()
            self._cond.notify_all()
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class ResponseStream:
    """The responses to one request, as an async iterator of :class:`StreamedResponse`; the
    iteration ends after the final one. ``close`` when the client goes away before that."""

    def __init__(
        self,
        channel: ResponseChannel,
        respond: Callable[[dict[str, Any]], InferenceResponse],
        on_close: Callable[[bool], None],
    ) -> None:
        """``respond`` makes a response of a sent response's outputs (on the loop);
        ``on_close(finished)`` runs once, when the stream ends or is closed."""
        self._channel = channel
        self._respond = respond
        self._on_close: Callable[[bool], None] | None = on_close
        self._ready: deque[StreamedResponse] = deque()
        self._done = False

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamedResponse:
        if not self._ready:
            if self._done:
                raise StopAsyncIteration
            await self._fill()
        item = self._ready.popleft()
        if item.final:
            self._done = True
            self._ready.clear()
            self._finish(True)
        return item

    async def _fill(self) -> None:
        items = await self._channel.take()
        if not items:  # the batch ended with no final response sent: the request is complete
            error = self._channel.ended
            self._ready.append(StreamedResponse(None, error, True))
            return
        respond = self._respond
        for outcome, final in items:
            if isinstance(outcome, InferplexError):
                self._ready.append(StreamedResponse(None, outcome, final))
            elif outcome:
                self._ready.append(StreamedResponse(respond(outcome), None, final))
            else:
                self._ready.append(StreamedResponse(None, None, final))

    def close(self) -> None:
        """The reader is done (its client went away, or it read to the end)."""
        self._done = True
        self._ready.clear()
        self._finish(False)

    def _finish(self, finished: bool) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            self._channel.close()
            on_close(finished)


class SingleResponse:
    """The stream of a model that answers each request once (an ordinary model): its one
    response (or error), final. Started on the first ``__anext__``."""

    def __init__(self, answer: Callable[[], Any]) -> None:
        """``answer()`` returns the awaitable of the response."""
        self._answer: Callable[[], Any] | None = answer

    def __aiter__(self) -> SingleResponse:
        return self

    async def __anext__(self) -> StreamedResponse:
        answer, self._answer = self._answer, None
        if answer is None:
            raise StopAsyncIteration
        try:
            return StreamedResponse(await answer())
        except InferplexError as exc:
            return StreamedResponse(None, exc)

    def close(self) -> None:
        """Nothing to tell: a reader that goes away cancels the task awaiting ``__anext__``."""
        self._answer = None


class Responses(Protocol):
    """What ``InferenceEngine.stream`` hands a frontend: a :class:`ResponseStream`, a
    :class:`SingleResponse`, or one of them behind the model's circuit breaker."""

    def __aiter__(self) -> Responses: ...

    async def __anext__(self) -> StreamedResponse: ...

    def close(self) -> None: ...
