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


def test_async_exec_refuses_decoupled() -> None:
    async def call() -> None:
        pb_utils.InferenceRequest(model_name="m").async_exec(decoupled=True)

    with pytest.raises(pb_utils.TritonModelException, match="decoupled"):
        asyncio.run(call())
