"""The generate endpoints decode a large body off the event loop (its JSON and one bytes
object per BYTES element take time in proportion), a small one on it; /generate takes exactly
one response; /generate_stream answers a refusal as JSON and a model's failure before any
response as an event stream with the error's status, as Triton."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.core.streaming import SingleResponse, StreamedResponse
from inferplex.errors import InferplexError, InvalidInputError, ModelExecutionError
from inferplex.frontends import http_generate
from inferplex.protocol.v2.offload import OFFLOAD_BYTES
from inferplex.transport.interface import StreamedBody
from inferplex.types import InferenceRequest, InferenceResponse

CONFIG = ModelConfig(
    name="m",
    input=(TensorConfig(name="text_input", data_type="BYTES", dims=(-1,)),),
    output=(TensorConfig(name="text_output", data_type="BYTES", dims=(-1,)),),
)


class _Engine:
    def model_config(self, model: str, version: str) -> ModelConfig:
        return CONFIG


class _Plane:
    def admit(self, request: InferenceRequest) -> None:
        pass

    async def stream(self, request: InferenceRequest) -> SingleResponse:
        async def answer() -> InferenceResponse:
            return InferenceResponse("m", "1", [], request.id)

        return SingleResponse(answer)


@pytest.mark.parametrize("elements", [10, OFFLOAD_BYTES])
async def test_a_large_body_is_decoded_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, elements: int
) -> None:
    threads: list[threading.Thread] = []
    decode = http_generate.decode_generate

    def recording(*args: Any) -> InferenceRequest:
        threads.append(threading.current_thread())
        return decode(*args)

    monkeypatch.setattr(http_generate, "decode_generate", recording)
    generate = http_generate.Generate(_Engine(), _Plane())  # type: ignore[arg-type]
    body = orjson.dumps({"id": "r", "text_input": ["ab"] * elements})
    status, _, _ = await generate.generate("m", "", body)
    assert status == 200
    on_loop = threads == [threading.main_thread()]
    assert on_loop is (len(body) <= OFFLOAD_BYTES)


class _Sent:
    """A stream of the given items, which records whether it was closed."""

    def __init__(self, items: list[StreamedResponse]) -> None:
        self.items = items
        self.taken = 0
        self.closed = False

    def __aiter__(self) -> _Sent:
        return self

    async def __anext__(self) -> StreamedResponse:
        if self.taken == len(self.items):
            raise StopAsyncIteration
        self.taken += 1
        return self.items[self.taken - 1]

    def close(self) -> None:
        self.closed = True


class _StreamingPlane(_Plane):
    def __init__(self, items: list[StreamedResponse]) -> None:
        self.sent = _Sent(items)

    async def stream(self, request: InferenceRequest) -> _Sent:  # type: ignore[override]
        return self.sent


def _response(final: bool = True) -> StreamedResponse:
    return StreamedResponse(InferenceResponse("m", "1", [], ""), None, final)


BODY = orjson.dumps({"text_input": ["ab"]})


@pytest.mark.parametrize(
    ("items", "sent", "taken"),
    [
        ([], "no response", 0),
        ([StreamedResponse(None)], "no response", 1),  # a final flag alone
        ([_response(False), _response(False), _response()], "more than one response", 2),
    ],
)
async def test_generate_takes_exactly_one_response(
    items: list[StreamedResponse], sent: str, taken: int
) -> None:
    plane = _StreamingPlane(items)
    generate = http_generate.Generate(_Engine(), plane)  # type: ignore[arg-type]
    with pytest.raises(InferplexError) as caught:
        await generate.generate("m", "", BODY)
    assert "generate expects model to produce exactly 1 response" in caught.value.message
    assert f"model 'm' sent {sent}" in caught.value.message
    # a model that sends a second response is stopped there
    assert plane.sent.closed and plane.sent.taken == taken


async def test_a_refusal_before_any_response_is_the_answer() -> None:
    refused = InvalidInputError("input 'x' is bad")
    plane = _StreamingPlane([StreamedResponse(None, refused)])
    generate = http_generate.Generate(_Engine(), plane)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await generate.generate_stream("m", "", BODY)
    assert plane.sent.closed


async def _events(body: StreamedBody) -> list[bytes]:
    chunks: AsyncIterator[bytes] = body.chunks
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("later", [[], [_response()]])
async def test_a_failure_before_any_response_is_a_stream_with_its_status(
    later: list[StreamedResponse],
) -> None:
    failed = ModelExecutionError("An Error Occurred")
    plane = _StreamingPlane([StreamedResponse(None, failed, not later), *later])
    generate = http_generate.Generate(_Engine(), plane)  # type: ignore[arg-type]
    status, body, headers = await generate.generate_stream("m", "", BODY)
    assert status == 500
    assert (b"content-type", b"text/event-stream; charset=utf-8") in headers
    assert isinstance(body, StreamedBody)
    events = await _events(body)
    assert events[0] == b'data: {"error":"An Error Occurred"}\n\n'
    assert len(events) == 1 + len(later)
