"""EngineStream: a backend's thread reading a called model's responses from the loop, and
stopping the call (its stream closed) however the reader leaves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from inferplex.backends.base import CallStopped
from inferplex.core.call_stream import EngineStream
from inferplex.core.streaming import StreamedResponse
from inferplex.errors import DeadlineExceededError, ModelNotFoundError
from inferplex.types import InferenceRequest, InferenceResponse, Tensor


class Counting:
    """A decoupled model's stream: responses 0 .. n-1 (the last final) as the test releases
    them; remembers whether it was closed."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sent = 0
        self.released = asyncio.Semaphore(0)
        self.closed = False

    def __aiter__(self) -> Counting:
        return self

    async def __anext__(self) -> StreamedResponse:
        await self.released.acquire()
        if self.closed:
            raise StopAsyncIteration
        i, self.sent = self.sent, self.sent + 1
        response = InferenceResponse("m", "1", [Tensor("OUT", "INT32", [1], [i])])
        return StreamedResponse(response, None, i == self.n - 1)

    def close(self) -> None:  # as a real one: a reader waiting wakes
        self.closed = True
        self.released.release()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    yield running
    running.call_soon_threadsafe(running.stop)
    thread.join(5)
    running.close()


def on(loop: asyncio.AbstractEventLoop, call: Any) -> Any:
    async def run() -> Any:
        return call()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(5)


def test_responses_in_order_then_the_final(loop: asyncio.AbstractEventLoop) -> None:
    stream = on(loop, lambda: Counting(3))

    async def open_stream(_: InferenceRequest) -> Any:
        for _ in range(3):
            stream.released.release()
        return stream

    reader = EngineStream(open_stream, InferenceRequest("m", []), loop)
    got = [reader.next(5) for _ in range(3)]
    assert [(r.outputs and r.outputs["OUT"], r.final) for r in got] == [
        ([0], False),
        ([1], False),
        ([2], True),
    ]
    assert not stream.closed  # it ended by itself


def test_a_call_that_cannot_start_is_one_final_error(loop: asyncio.AbstractEventLoop) -> None:
    async def open_stream(request: InferenceRequest) -> Any:
        raise ModelNotFoundError(request.model_name)

    only = EngineStream(open_stream, InferenceRequest("nope", []), loop).next(5)
    assert only.final and isinstance(only.error, ModelNotFoundError)


def test_a_timeout_stops_the_call(loop: asyncio.AbstractEventLoop) -> None:
    stream = on(loop, lambda: Counting(3))

    async def open_stream(_: InferenceRequest) -> Any:
        return stream  # nothing released: the model is silent

    reader = EngineStream(open_stream, InferenceRequest("m", []), loop)
    late = reader.next(0.05)
    assert late.final and isinstance(late.error, DeadlineExceededError)
    on(loop, lambda: None)  # the stop ran on the loop
    assert stream.closed


def test_a_call_closed_while_it_opens_is_stopped_once_open(
    loop: asyncio.AbstractEventLoop,
) -> None:
    stream = on(loop, lambda: Counting(3))
    opening = threading.Event()

    made: list[Counting] = []

    async def open_stream(_: InferenceRequest) -> Any:
        await asyncio.to_thread(opening.wait, 5)  # its model loading, say
        made.append(stream)
        return stream

    reader = EngineStream(open_stream, InferenceRequest("m", []), loop)
    late = reader.next(0.05)  # gives up while the call opens: the call is stopped
    assert late.final and isinstance(late.error, DeadlineExceededError)
    opening.set()
    on(loop, lambda: None)
    # the opening was cancelled, or the stream it made is closed: no call runs unread
    assert not made or stream.closed
    reader.close()
    ended = reader.next(5)
    assert ended.final and isinstance(ended.error, CallStopped)


def test_closing_cancels_a_call_waiting_on_an_ordinary_model(
    loop: asyncio.AbstractEventLoop,
) -> None:
    cancelled = threading.Event()

    class Unary:
        """An ordinary model's one answer, which never comes (closing does not wake it)."""

        def __aiter__(self) -> Unary:
            return self

        async def __anext__(self) -> StreamedResponse:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise
            raise AssertionError("unreachable")

        def close(self) -> None:
            pass

    async def open_stream(_: InferenceRequest) -> Any:
        return Unary()

    reader = EngineStream(open_stream, InferenceRequest("m", []), loop)
    late = reader.next(0.05)
    assert late.final and isinstance(late.error, DeadlineExceededError)
    assert cancelled.wait(5)  # the request waiting on the model was cancelled
