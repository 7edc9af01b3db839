"""Triton's generate extension over HTTP: ``POST /v2/models/{m}/generate`` answers one JSON
object, ``/generate_stream`` one server-sent event (``data: {...}``) per response as the
model sends it (docs/streaming.md).

Errors, as Triton answers them: a request refused before its model runs (a bad value, a
missing input, an unknown model, a body too large: the 4xx errors) gets a JSON error with its
status on both endpoints. On ``/generate_stream``, a model that fails at the request (a 5xx
error) before sending anything answers with that status and the error as the stream's one
event; an error after a response is an event ``data: {"error": ...}`` of a stream that began
with 200. ``/generate`` takes exactly one response: a model that sends none or several gets
Triton's "generate expects model to produce exactly 1 response".

The stream is as slow as its reader: the next event is made once the last has left
(``StreamedBody``), so a reader that does not read holds the model back; one that goes away
cancels the request in the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import orjson

from inferplex.core.streaming import Responses, StreamedResponse
from inferplex.errors import UnsupportedError
from inferplex.protocol.dataplane import DataPlane
from inferplex.protocol.v2.errors import HTTP_STATUS
from inferplex.protocol.v2.generate import decode_generate, encode_generate
from inferplex.protocol.v2.offload import OFFLOAD_BYTES
from inferplex.transport.interface import StreamedBody
from inferplex.types import InferenceRequest

if TYPE_CHECKING:
    from inferplex.engine.inference import InferenceEngine

Headers = list[tuple[bytes, bytes]]
Reply = tuple[int, bytes | StreamedBody, Headers]

_JSON: Headers = [(b"content-type", b"application/json")]
_EVENTS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class Generate:
    """The two endpoints, over the data plane."""

    def __init__(self, engine: InferenceEngine, plane: DataPlane) -> None:
        self._engine = engine
        self._plane = plane

    async def generate(self, model: str, version: str, body: bytes | memoryview) -> Reply:
        """One response: a model that sends another is stopped at it."""
        responses = await self._plane.stream(await self._request(model, version, body))
        found = None
        try:
            async for item in responses:
                if item.error is not None:
                    raise item.error
                if item.response is None:
                    continue
                if found is not None:
                    raise _not_one(model, "more than one response")
                found = item.response
        finally:
            responses.close()
        if found is None:
            raise _not_one(model, "no response")
        return 200, orjson.dumps(encode_generate(found)), _JSON

    async def generate_stream(self, model: str, version: str, body: bytes | memoryview) -> Reply:
        """The responses as events; a refusal before the first is the request's answer."""
        responses = await self._plane.stream(await self._request(model, version, body))
        first = await anext(responses, None)
        status = 200
        if first is not None and first.error is not None:
            status = HTTP_STATUS[first.error.code]
            if status < 500:  # refused, not failed: nothing was generated
                responses.close()
                raise first.error
        return status, StreamedBody(_events(first, responses)), _EVENTS

    async def _request(
        self, model: str, version: str, body: bytes | memoryview
    ) -> InferenceRequest:
        """The request of a body, decoded in a worker thread when it is large (parsing its
        JSON and making one bytes object per BYTES element take time in proportion)."""
        config = self._engine.model_config(model, version)
        if len(body) <= OFFLOAD_BYTES:
            request = decode_generate(body, config, version)
        else:
            request = await asyncio.to_thread(decode_generate, body, config, version)
        self._plane.admit(request)
        return request


def _not_one(model: str, sent: str) -> UnsupportedError:
    return UnsupportedError(
        "generate expects model to produce exactly 1 response, use generate_stream for a "
        f"model that sends another number: model '{model}' sent {sent} to this request"
    )


async def _events(
    first: StreamedResponse | None, responses: Responses
) -> AsyncGenerator[bytes, None]:
    """One ``data:`` event per response (a final flag alone makes none)."""
    try:
        if first is not None:
            yield _event(first)
        async for item in responses:
            yield _event(item)
    finally:
        responses.close()


def _event(item: StreamedResponse) -> bytes:
    if item.error is not None:
        return b"data: " + orjson.dumps({"error": item.error.message}) + b"\n\n"
    if item.response is None:
        return b""
    return b"data: " + orjson.dumps(encode_generate(item.response)) + b"\n\n"
