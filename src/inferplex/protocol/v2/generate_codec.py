"""Triton's generate extension on the data plane: ``POST /v2/models/{m}/generate`` answers
one JSON object, ``/generate_stream`` one server-sent event (``data: {...}``) per response as
the model sends it (docs/streaming.md). The body's conversion is ``generate.py``'s.

Errors, as Triton answers them: a request refused before its model runs (a bad value, a
missing input, an unknown model: the 4xx errors) gets a JSON error with its status on both
endpoints. On ``/generate_stream``, a model that fails at the request (a 5xx error) before
sending anything answers with that status and the error as the stream's one event; an error
after a response is an event ``data: {"error": ...}`` of a stream that began with 200.
``/generate`` takes exactly one response: a model that sends none or several gets Triton's
"generate expects model to produce exactly 1 response".
"""

from __future__ import annotations

import orjson

from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane.checks import CheckFactory
from inferplex.dataplane.classes import Configs
from inferplex.dataplane.codec import Body, CallMeta, HttpHead, SpanLabel
from inferplex.errors import UnsupportedError
from inferplex.protocol.v2.codecs import http_status
from inferplex.protocol.v2.errors import HTTP_STATUS
from inferplex.protocol.v2.generate import decode_generate, encode_generate
from inferplex.shm.registry import Regions
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = ["GenerateCodec"]

_JSON = [(b"content-type", b"application/json")]
_EVENTS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class GenerateCodec:
    """``/generate`` (``stream=False``: one JSON answer) or ``/generate_stream`` (events)."""

    def __init__(self, configs: Configs, stream: bool) -> None:
        """``configs``: where each model's configuration comes from (the engine)."""
        self._configs = configs
        self._stream = stream
        self._endpoint = "generate_stream" if stream else "generate"

    def span(self, meta: CallMeta) -> SpanLabel:
        attributes = {
            "http.request.method": "POST",
            "rpc.system": "triton_generate",
            "inferplex.model.name": meta.model,
        }
        name = f"POST /v2/models/{meta.model}/{self._endpoint}"
        return SpanLabel(name, attributes, "http.response.status_code", http_status)

    def work(self, body: Body, meta: CallMeta) -> int:
        # parsing its JSON and making one bytes object per BYTES element take time in proportion
        return len(body)

    def decode(
        self, body: Body, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        config = self._configs.model_config(meta.model, meta.version)
        return decode_generate(body, config, meta.version)

    def encoder(self, request: InferenceRequest, meta: CallMeta) -> Events | OneAnswer:
        return Events() if self._stream else OneAnswer(request.model_name)


class Events:
    """``/generate_stream``: one ``data:`` event per response (a final flag alone makes
    none); an error refused before the first is the call's answer."""

    def head(self, first: StreamedResponse) -> HttpHead:
        status = 200
        if first.error is not None:
            status = HTTP_STATUS[first.error.code]
            if status < 500:  # refused, not failed: nothing was generated
                raise first.error
        return HttpHead(status, _EVENTS)

    def item(self, item: StreamedResponse) -> bytes | None:
        if item.error is not None:
            return b"data: " + orjson.dumps({"error": item.error.message}) + b"\n\n"
        if item.response is None:
            return None
        return b"data: " + orjson.dumps(encode_generate(item.response)) + b"\n\n"

    def end(self) -> None:
        return None


class OneAnswer:
    """``/generate``: the one response as a JSON object; a model that sends another is
    stopped at it."""

    __slots__ = ("_found", "_model")

    def __init__(self, model: str) -> None:
        self._model = model
        self._found: InferenceResponse | None = None

    def head(self, first: StreamedResponse) -> HttpHead:
        if first.error is not None:
            raise first.error
        return HttpHead(200, _JSON, whole=True)

    def item(self, item: StreamedResponse) -> None:
        if item.error is not None:
            raise item.error
        if item.response is not None:
            if self._found is not None:
                raise _not_one(self._model, "more than one response")
            self._found = item.response

    def end(self) -> bytes:
        if self._found is None:
            raise _not_one(self._model, "no response")
        return orjson.dumps(encode_generate(self._found))


def _not_one(model: str, sent: str) -> UnsupportedError:
    return UnsupportedError(
        "generate expects model to produce exactly 1 response, use generate_stream for a "
        f"model that sends another number: model '{model}' sent {sent} to this request"
    )
