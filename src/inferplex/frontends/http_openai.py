"""The OpenAI-compatible API over HTTP (docs/openai.md): ``GET /v1/models[/{id}]``,
``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``, through the data
plane as ``/infer`` and ``/generate_stream`` go (limits, routes, breakers, deadlines).

Thin: the codec (``protocol/openai``) reads the request and writes the answer; this module
fetches the model's config and folder files, offloads a large request's decoding, admits
each model request and opens its stream. Errors are OpenAI's error object with its status.
A streamed answer is as slow as its reader (``StreamedBody``); a reader that goes away closes
every choice's stream, which cancels the model's work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from inferplex.config.model_config import ModelConfig
from inferplex.dataplane import OFFLOAD_BYTES, DataPlane
from inferplex.errors import InferplexError, unknown_model
from inferplex.protocol.openai import encode
from inferplex.protocol.openai.embeddings import embedding_answer, plan_embedding, read_embedding
from inferplex.protocol.openai.errors import error_reply
from inferplex.protocol.openai.generation import Run, prepare
from inferplex.protocol.openai.requests import Generation, read_chat, read_completion
from inferplex.protocol.openai.text_model import TextModel, read_text_model
from inferplex.transport.interface import StreamedBody

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig
    from inferplex.engine.inference import InferenceEngine

Headers = list[tuple[bytes, bytes]]
Reply = tuple[int, bytes | StreamedBody, Headers]
Body = bytes | memoryview
T = TypeVar("T")

_JSON: Headers = [(b"content-type", b"application/json")]
_EVENTS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
#: the text models kept read, by model; the oldest goes first
_TEXT_MODELS_KEPT = 64


class OpenAI:
    """The endpoints, over the data plane."""

    def __init__(self, engine: InferenceEngine, plane: DataPlane, config: ServerConfig) -> None:
        self._engine = engine
        self._plane = plane
        self._max_choices = config.openai_max_choices
        self._max_inputs = config.openai_max_embedding_inputs
        self._owner = config.server_name
        self._created = int(time.time())
        self._texts: dict[str, tuple[ModelConfig, TextModel]] = {}

    async def models(self) -> Reply:
        names = {m["name"] for m in self._engine.repository_index(ready_only=True)}
        names.update(r["name"] for r in self._engine.route_listing()["routes"])
        return _json(encode.model_list(sorted(names), self._created, self._owner))

    async def model(self, name: str) -> Reply:
        try:
            ready = self._engine.model_ready(name)
        except InferplexError:
            ready = False
        if not ready:
            return _error(unknown_model(name))
        return _json(encode.model_object(name, self._created, self._owner))

    async def chat(self, body: Body) -> Reply:
        return await self._generate(body, read_chat)

    async def completions(self, body: Body) -> Reply:
        return await self._generate(body, read_completion)

    async def embeddings(self, body: Body) -> Reply:
        try:
            request = await _decoded(body, read_embedding, body, self._max_inputs)
            config = self._engine.model_config(request.model)
            texts = await self._text_model(request.model, config)
            plan = await _decoded(body, plan_embedding, request, config, texts)
            # requests built here, in Python: through the data plane's door for them
            responses = await asyncio.gather(*(self._plane.infer_local(r) for r in plan.requests))
            return _json(embedding_answer(plan, list(responses), request.model))
        except InferplexError as exc:
            return _error(exc)

    async def _generate(self, body: Body, read: Callable[[Body, int], Generation]) -> Reply:
        started = time.monotonic_ns()
        try:
            request = await _decoded(body, read, body, self._max_choices)
            config = self._engine.model_config(request.model)
            texts = await self._text_model(request.model, config)
            prepared = await _decoded(body, prepare, request, config, texts, request.model)
            run = Run(prepared, started)
            await run.open(self._plane.stream_local)
            if not request.stream:
                return _json(await run.whole())
            first = await run.first()
        except InferplexError as exc:
            return _error(exc)
        return 200, StreamedBody(run.events(first)), _EVENTS

    async def _text_model(self, name: str, config: ModelConfig) -> TextModel:
        """The model's tokenizer and chat template, read once per configuration (a reload
        brings a new one), in a worker thread."""
        known = self._texts.get(name)
        if known is not None and known[0] is config:
            return known[1]
        route = self._engine.routes.get(name)  # a route: its first target's files
        folder = self._plane.folder(route.primary("").model if route is not None else name)
        context = config.parameters.get("context_length")
        texts = await asyncio.to_thread(read_text_model, folder, context)
        if len(self._texts) >= _TEXT_MODELS_KEPT:
            del self._texts[next(iter(self._texts))]
        self._texts[name] = (config, texts)
        return texts


async def _decoded(body: Body, function: Callable[..., T], *args: Any) -> T:
    """``function(*args)``: for a large body in a worker thread (reading its JSON, the chat
    template and the tokenizer take time in proportion)."""
    if len(body) <= OFFLOAD_BYTES:
        return function(*args)
    return await asyncio.to_thread(function, *args)


def _json(document: Any) -> Reply:
    return 200, orjson.dumps(document), _JSON


def _error(error: InferplexError) -> Reply:
    status, payload = error_reply(error)
    return status, payload, _JSON
