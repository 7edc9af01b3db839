"""The OpenAI-compatible API over HTTP (docs/openai.md): ``GET /v1/models[/{id}]``,
``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``.

Thin: the inference endpoints are codecs on the data plane (``protocol/openai/codecs.py``),
called as ``/infer`` and ``/generate_stream`` are, with the (body, meta) the HTTP frontend
read, so the routing header, tracing spans, deadlines, the offload of large bodies, limits
and breakers apply to each model request; this module maps their answer to HTTP (a whole
body, or server-sent events as they come: ``StreamedBody``, as slow as its reader; a reader
that goes away closes every choice's stream, which cancels the model's work). An error is
raised, and answered by the frontend as OpenAI's error object with its status."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from inferplex.dataplane import CallMeta, DataPlane
from inferplex.dataplane.codec import Body, Headers
from inferplex.errors import InferplexError, unknown_model
from inferplex.protocol.openai import encode
from inferplex.protocol.openai.codecs import Kind, embed, generate
from inferplex.protocol.openai.models import TextModels
from inferplex.transport.interface import StreamedBody

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig
    from inferplex.engine.inference import InferenceEngine

Reply = tuple[int, bytes | StreamedBody, Headers]

_JSON: Headers = [(b"content-type", b"application/json")]


class OpenAI:
    """The endpoints, over the data plane."""

    def __init__(self, engine: InferenceEngine, plane: DataPlane, config: ServerConfig) -> None:
        self._engine = engine
        self._plane = plane
        self._max_choices = config.openai_max_choices
        self._max_inputs = config.openai_max_embedding_inputs
        self._owner = config.server_name
        self._created = int(time.time())
        self._models = TextModels(engine, self._source, plane.folder)

    async def models(self) -> Reply:
        names = {m["name"] for m in self._engine.repository_index(ready_only=True)}
        names.update(r["name"] for r in self._engine.route_listing()["routes"])
        return (
            200,
            orjson.dumps(encode.model_list(sorted(names), self._created, self._owner)),
            _JSON,
        )

    async def model(self, name: str) -> Reply:
        try:
            ready = self._engine.model_ready(name)
        except InferplexError:
            ready = False
        if not ready:
            raise unknown_model(name)
        return 200, orjson.dumps(encode.model_object(name, self._created, self._owner)), _JSON

    async def chat(self, body: Body, meta: CallMeta) -> Reply:
        return await self._generate("chat", body, meta)

    async def completions(self, body: Body, meta: CallMeta) -> Reply:
        return await self._generate("completion", body, meta)

    async def embeddings(self, body: Body, meta: CallMeta) -> Reply:
        head, answer = await embed(self._plane, self._models, self._max_inputs, body, meta)
        return head.status, answer, head.headers

    async def _generate(self, kind: Kind, body: Body, meta: CallMeta) -> Reply:
        head, answer = await generate(
            self._plane, self._models, kind, self._max_choices, body, meta
        )
        sent = answer if isinstance(answer, bytes) else StreamedBody(answer)
        return head.status, sent, head.headers

    def _source(self, name: str) -> str:
        """The model whose tokenizer files serve ``name``: a route's first target."""
        route = self._engine.routes.get(name)
        return route.primary("").model if route is not None else name
