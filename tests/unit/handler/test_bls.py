"""Calls to other models from a handler: ``infer`` one at a time, ``infer_async`` /
``async_exec`` gathered into one message that the server runs at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from inferplex.handler import bls


class FakeLink:
    """The worker's link: answers each call with its inputs doubled (model 'bad': an error)."""

    def __init__(self) -> None:
        self.messages: list[list[bls.Call]] = []

    def call_many(self, calls: Sequence[bls.Call]) -> list[bls.Answer]:
        self.messages.append(list(calls))
        return [
            bls.ModelCallError(f"unknown model '{c.model_name}'", "not_found")
            if c.model_name == "bad"
            else {f"{n}_OUT": np.asarray(v) * 2 for n, v in c.inputs.items()}
            for c in calls
        ]


@pytest.fixture
def link(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLink]:
    fake = FakeLink()
    monkeypatch.setattr(bls, "_link", fake)
    yield fake


def test_infer_is_one_call(link: FakeLink) -> None:
    out = bls.infer("m", {"X": np.ones(2)}, ["X_OUT"], version="2", timeout=1.5)
    assert out["X_OUT"].tolist() == [2.0, 2.0]
    assert link.messages == [[bls.Call("m", {"X": pytest.approx(np.ones(2))}, ["X_OUT"], "2", 1.5)]]
    with pytest.raises(bls.ModelCallError, match="unknown model 'bad'") as failed:
        bls.infer("bad", {})
    assert failed.value.code == "not_found"


def test_calls_started_together_go_in_one_message(link: FakeLink) -> None:
    async def handler() -> list[pb_utils.InferenceResponse]:
        requests = [
            pb_utils.InferenceRequest(
                model_name=name, inputs=[pb_utils.Tensor("X", np.full(2, i, np.float32))]
            )
            for i, name in enumerate(["a", "bad", b"c"])
        ]
        first = await asyncio.gather(*(r.async_exec() for r in requests))
        second = await requests[0].async_exec()  # later: a message of its own
        return [*first, second]

    responses = asyncio.run(handler())
    assert [[c.model_name for c in message] for message in link.messages] == [
        ["a", "bad", "c"],
        ["a"],
    ]
    assert pb_utils.get_output_tensor_by_name(responses[2], "X_OUT").as_numpy().tolist() == [4, 4]
    assert responses[1].has_error()
    error = responses[1].error()
    assert error is not None and error.code() == pb_utils.TritonError.NOT_FOUND
    assert not responses[3].has_error()


def test_async_exec_outside_a_served_model_answers_an_error_response() -> None:
    async def call() -> pb_utils.InferenceResponse:
        return await pb_utils.InferenceRequest(model_name="m").async_exec()

    response = asyncio.run(call())
    error = response.error()
    assert error is not None and "python backend" in error.message()


class StreamLink(FakeLink):
    """Streams too: a call of model 'count' with input N answers N responses (0, 1, ...)
    then Triton's empty final one; model 'bad' one final error; cancel ends with one."""

    def __init__(self) -> None:
        super().__init__()
        self.streams: dict[int, list[bls.Streamed]] = {}
        self.cancelled: list[int] = []

    def open_stream(self, call: bls.Call) -> int:
        self.messages.append([call])
        if call.model_name == "bad":
            items = [bls.Streamed(None, bls.ModelCallError("it broke", "invalid_argument"), True)]
        else:
            count = int(np.asarray(call.inputs["N"])[0])
            items = [bls.Streamed({"OUT": np.array([i])}, None, False) for i in range(count)]
            items.append(bls.Streamed(None, None, True))
        number = len(self.streams) + 1
        self.streams[number] = items
        return number

    def next_response(self, stream: int) -> bls.Streamed:
        return self.streams[stream].pop(0)

    def cancel_stream(self, stream: int) -> None:
        self.cancelled.append(stream)
        error = bls.ModelCallError("the call was cancelled", "cancelled")
        self.streams[stream] = [bls.Streamed(None, error, True)]


@pytest.fixture
def stream_link(monkeypatch: pytest.MonkeyPatch) -> Iterator[StreamLink]:
    fake = StreamLink()
    monkeypatch.setattr(bls, "_link", fake)
    yield fake


def counted(n: int, model: str = "count") -> pb_utils.InferenceRequest:
    n_input = pb_utils.Tensor("N", np.array([n], np.int32))
    return pb_utils.InferenceRequest(model_name=model, inputs=[n_input])


def outs(responses: list[pb_utils.InferenceResponse]) -> list[list[int]]:
    return [[int(v) for t in r.output_tensors() for v in t.as_numpy()] for r in responses]


def test_exec_decoupled_iterates_the_responses_as_triton_does(stream_link: StreamLink) -> None:
    responses = list(counted(3).exec(decoupled=True))
    # the responses in order, then the final one without outputs (Triton's empty final)
    assert outs(responses) == [[0], [1], [2], []]
    assert not any(r.has_error() for r in responses)
    failed = list(counted(1, "bad").exec(decoupled=True))
    assert len(failed) == 1 and failed[0].has_error()
    error = failed[0].error()
    assert error is not None and error.code() == pb_utils.TritonError.INVALID_ARG


def test_async_exec_decoupled_gives_iterators_for_both_fors(stream_link: StreamLink) -> None:
    async def handler() -> tuple[list[pb_utils.InferenceResponse], ...]:
        first, second = await asyncio.gather(
            counted(2).async_exec(decoupled=True), counted(1).async_exec(decoupled=True)
        )
        plain = list(first)  # Triton's example: a plain for in the coroutine
        awaited = [r async for r in second]
        return plain, awaited

    plain, awaited = asyncio.run(handler())
    assert outs(plain) == [[0], [1], []]
    assert outs(awaited) == [[0], []]
    assert len(stream_link.streams) == 2


def test_cancel_stops_the_call_and_ends_with_a_cancelled_error(stream_link: StreamLink) -> None:
    responses = counted(5).exec(decoupled=True)
    assert outs([next(responses)]) == [[0]]
    responses.cancel()
    rest = list(responses)
    assert stream_link.cancelled == [1]
    assert len(rest) == 1
    error = rest[0].error()
    assert error is not None and error.code() == pb_utils.TritonError.CANCELLED
    responses.cancel()  # ended: nothing more to stop
    assert stream_link.cancelled == [1]


def test_infer_stream_without_triton_classes(stream_link: StreamLink) -> None:
    items = list(bls.infer_stream("count", {"N": np.array([2])}, ["OUT"], timeout=2.0))
    assert [i.final for i in items] == [False, False, True]
    assert stream_link.messages == [[bls.Call("count", {"N": [2]}, ["OUT"], "", 2.0)]]
