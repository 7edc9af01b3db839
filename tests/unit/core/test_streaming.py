"""ResponseChannel and ResponseStream (core/streaming.py): a sending thread, the event loop
reading; the bound holds the sender back; a reader that goes away releases it."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from inferplex.core.streaming import ResponseChannel, ResponseStream
from inferplex.errors import InvalidInputError
from inferplex.types import InferenceResponse, Tensor


def respond(outputs: dict[str, np.ndarray]) -> InferenceResponse:
    return InferenceResponse("m", "1", [Tensor(n, "INT32", a.shape, a) for n, a in outputs.items()])


def sender(channel: ResponseChannel, count: int, sent: list[int]) -> threading.Thread:
    """A thread sending ``count`` responses (then the final flag), recording each sent."""

    def send() -> None:
        for i in range(count):
            if not channel.send({"OUT": np.array([i], np.int32)}, False):
                return
            sent.append(i)
        channel.send(None, True)

    thread = threading.Thread(target=send)
    thread.start()
    return thread


async def test_a_full_channel_holds_the_sender_back_until_the_reader_takes() -> None:
    channel = ResponseChannel(asyncio.get_running_loop(), ["OUT"], bound=3)
    sent: list[int] = []
    thread = sender(channel, 50, sent)
    while len(sent) < 3:  # what fits
        await asyncio.sleep(0.01)
    thread.join(0.2)
    assert thread.is_alive() and len(sent) == 3  # then it waits for room
    stream = ResponseStream(channel, respond, lambda finished: None)
    items = [item async for item in stream]
    thread.join()
    assert [i.response.outputs[0].data.tolist() for i in items if i.response] == [
        [n] for n in range(50)
    ]
    assert items[-1].final and items[-1].response is None


async def test_a_reader_that_goes_away_releases_the_sender() -> None:
    channel = ResponseChannel(asyncio.get_running_loop(), ["OUT"], bound=2)
    closed: list[bool] = []
    stream = ResponseStream(channel, respond, closed.append)
    sent: list[int] = []
    thread = sender(channel, 1000, sent)
    await stream.__anext__()
    stream.close()
    thread.join(5)
    assert not thread.is_alive() and len(sent) < 1000
    assert closed == [False] and channel.closed


async def test_the_batch_ending_without_a_final_flag_ends_the_stream_with_its_error() -> None:
    channel = ResponseChannel(asyncio.get_running_loop(), ["OUT"])
    stream = ResponseStream(channel, respond, lambda finished: None)
    channel.send({"OUT": np.array([1], np.int32), "OTHER": np.array([2])}, False)
    channel.end(InvalidInputError("the model failed"))
    first, last = [item async for item in stream]
    assert first.response is not None and [t.name for t in first.response.outputs] == ["OUT"]
    assert last.final and last.error is not None and last.error.message == "the model failed"
