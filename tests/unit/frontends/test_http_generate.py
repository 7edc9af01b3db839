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
from inferplex.dataplane import OFFLOAD_BYTES, CallMeta, DataPlane
from inferplex.errors import InferplexError, InvalidInputError, ModelExecutionError
from inferplex.frontends import http_generate
from inferplex.protocol.v2 import generate_codec
from inferplex.security.limits import RequestLimits
from inferplex.transport.interface import StreamedBody
from inferplex.types import InferenceRequest, InferenceResponse

CONFIG = ModelConfig(
    name="m",
    input=(TensorConfig(name="text_input", data_type="BYTES", dims=(-1,)),),
    output=(TensorConfig(name="text_output", data_type="BYTES", dims=(-1,)),),
)


class _Engine:
    """A model 'm' that answers each request once, or sends the given items."""

    shared_memory = None

    def __init__(self, items: list[StreamedResponse] | None = None) -> None:
        self.sent = None if items is None else _Sent(items)

    def model_config(self, model: str, version: str = "") -> ModelConfig:
        return CONFIG

    def input_checks(self, name: str, version: str = "") -> None:
        return None

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse("m", "1", [], request.id)

    async def stream(self, request: InferenceRequest) -> Any:
        return SingleResponse(lambda: self.infer(request)) if self.sent is None else self.sent


def generate_of(engine: _Engine) -> http_generate.Generate:
    plane = DataPlane(engine, RequestLimits(10**9, 10**9))  # type: ignore[arg-type]
    return http_generate.Generate(engine, plane)  # type: ignore[arg-type]


META = CallMeta("m")


@pytest.mark.parametrize("elements", [10, OFFLOAD_BYTES])
async def test_a_large_body_is_decoded_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, elements: int
) -> None:
    threads: list[threading.Thread] = []
    decode = generate_codec.decode_generate

    def recording(*args: Any) -> InferenceRequest:
        threads.append(threading.current_thread())
        return decode(*args)

    monkeypatch.setattr(generate_codec, "decode_generate", recording)
    generate = generate_of(_Engine())
    body = orjson.dumps({"id": "r", "text_input": ["ab"] * elements})
    status, _, _ = await generate.generate(body, META)
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
    engine = _Engine(items)
    with pytest.raises(InferplexError) as caught:
        await generate_of(engine).generate(BODY, META)
    assert "generate expects model to produce exactly 1 response" in caught.value.message
    assert f"model 'm' sent {sent}" in caught.value.message
    # a model that sends a second response is stopped there
    assert engine.sent is not None and engine.sent.closed and engine.sent.taken == taken


async def test_a_refusal_before_any_response_is_the_answer() -> None:
    refused = InvalidInputError("input 'x' is bad")
    engine = _Engine([StreamedResponse(None, refused)])
    with pytest.raises(InvalidInputError):
        await generate_of(engine).generate_stream(BODY, META)
    assert engine.sent is not None and engine.sent.closed


async def _events(body: StreamedBody) -> list[bytes]:
    chunks: AsyncIterator[bytes] = body.chunks
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("later", [[], [_response()]])
async def test_a_failure_before_any_response_is_a_stream_with_its_status(
    later: list[StreamedResponse],
) -> None:
    failed = ModelExecutionError("An Error Occurred")
    engine = _Engine([StreamedResponse(None, failed, not later), *later])
    status, body, headers = await generate_of(engine).generate_stream(BODY, META)
    assert status == 500
    assert (b"content-type", b"text/event-stream; charset=utf-8") in headers
    assert isinstance(body, StreamedBody)
    events = await _events(body)
    assert events[0] == b'data: {"error":"An Error Occurred"}\n\n'
    assert len(events) == 1 + len(later)
