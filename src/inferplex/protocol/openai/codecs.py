"""The OpenAI-compatible API as codecs on the data plane (``dataplane/codec.py``): chat and
completions are stream codecs (``DataPlane.stream``: a whole answer or server-sent events),
embeddings a codec answered once (``DataPlane.infer``). Each model request of an OpenAI
request is one call through the door (``fanout.py``): a choice of a chat or completion, a
batch of an embedding request. The first call's ``decode`` reads the body (the request's
fields, the chat template, the tokenizer: in a worker thread for a large body, or for the
first request after a model's (re)load, whose tokenizer files are read then) and plans every
call; the others take their request from the plan.

:func:`generate` and :func:`embed` answer one request: what an HTTP frontend sends back (a
head and its body, whole or as it comes), or an InferplexError naming what is wrong (the
frontend answers it as OpenAI's error object)."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any, Generic, TypeVar

import numpy as np
import orjson

from inferplex.dataplane.checks import CheckFactory
from inferplex.dataplane.codec import Body, CallMeta, HttpHead, SpanLabel
from inferplex.dataplane.local import LOCAL
from inferplex.dataplane.offload import OFFLOAD_BYTES
from inferplex.dataplane.plane import DataPlane
from inferplex.dataplane.streams import Streamed
from inferplex.protocol.openai.answer import EVENTS, WHOLE, Answer, ChoiceEvents, ChoicePieces
from inferplex.protocol.openai.embeddings import (
    EmbeddingPlan,
    embedding_answer,
    plan_embedding,
    read_embedding,
    vectors_of,
)
from inferplex.protocol.openai.fanout import Plan, answers, later_meta, start
from inferplex.protocol.openai.generation import prepare
from inferplex.protocol.openai.models import TextModels
from inferplex.protocol.openai.requests import Kind, read_chat, read_completion
from inferplex.protocol.v2.codecs import http_status
from inferplex.shm.registry import Regions
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = ["Kind", "embed", "generate"]

_READ = {"chat": read_chat, "completion": read_completion}
_PATH = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}

P = TypeVar("P")
R = TypeVar("R")
S = TypeVar("S", bound="_Request[Any]")


def _label(path: str) -> SpanLabel:
    attributes = {"http.request.method": "POST", "http.route": path, "rpc.system": "openai"}
    return SpanLabel(f"POST {path}", attributes, "http.response.status_code", http_status)


_LABELS = {path: _label(path) for path in (*_PATH.values(), "/v1/embeddings")}


class _Request(ABC, Generic[P]):
    """One OpenAI request: what its calls share, the plan its first call makes of the body."""

    __slots__ = ("label", "models", "plan")

    def __init__(self, models: TextModels, label: SpanLabel) -> None:
        self.models = models
        self.label = label
        self.plan: Plan[P] = Plan()

    @abstractmethod
    def read(self, body: Body, on_loop: bool) -> P:
        """The plan of every call, made of ``body`` (on the loop: ``on_loop``)."""

    @abstractmethod
    def requests(self) -> list[InferenceRequest]:
        """The model requests of the plan, one a call."""


class _Part(Generic[S]):
    """The call of model request ``index`` of an OpenAI request: a codec's span, work and
    decode."""

    __slots__ = ("_call", "_index")

    def __init__(self, call: S, index: int) -> None:
        self._call = call
        self._index = index

    def span(self, meta: CallMeta) -> SpanLabel:
        return self._call.label

    def work(self, body: Body, meta: CallMeta) -> int:
        # the first call reads the body: its JSON, the template and the tokenizer take time
        # in proportion; the others take their request from the plan
        return len(body) if self._index == 0 else 0

    def decode(
        self, body: Body, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        if self._index == 0:  # the data plane decodes on the loop without checks
            self._call.read(body, checks is None)
        # a request built here: each tensor checked as a decoded one is
        return LOCAL.decode(self._call.requests()[self._index], meta, regions, checks)


async def _calls(
    door: Callable[[Any, Body, CallMeta], Coroutine[Any, Any, R]],
    part: Callable[[int], Any],
    call: _Request[Any],
    body: Body,
    meta: CallMeta,
    release: Callable[[R], None] | None = None,
) -> list[asyncio.Future[R]]:
    """``call``'s calls through ``door`` (``DataPlane.stream`` or ``infer``), ``part(i)``
    the codec of call ``i``, once one has answered (``fanout.start``)."""

    def rest() -> list[Coroutine[Any, Any, R]]:
        later = later_meta(meta)  # the first call's span is open: the rest join its trace
        return [door(part(i), body, later) for i in range(1, len(call.requests()))]

    return await start(door(part(0), body, meta), call.plan, rest, release)


# -- chat and completions ---------------------------------------------------------------------
async def generate(
    door: DataPlane, models: TextModels, kind: Kind, max_choices: int, body: Body, meta: CallMeta
) -> tuple[HttpHead, bytes | AsyncGenerator[bytes, None]]:
    """A chat (``kind`` "chat") or completion request's answer: one JSON object, or its
    events as they come (``stream``)."""
    call = _Generation(models, kind, max_choices)
    # a whole answer's streams carry Pieces, a streamed one's events (Answer.encoder)
    calls: list[asyncio.Future[Streamed[HttpHead, Any]]] = await _calls(
        door.stream, lambda i: _Choice(call, i), call, body, meta, Streamed.close
    )
    answer = call.plan.ready
    if answer.prepared.request.stream:
        return EVENTS, answer.events(calls)
    return WHOLE, await answer.whole(calls)


class _Generation(_Request[Answer]):
    """One chat or completion request."""

    __slots__ = ("kind", "max_choices", "started")

    def __init__(self, models: TextModels, kind: Kind, max_choices: int) -> None:
        super().__init__(models, _LABELS[_PATH[kind]])
        self.kind = kind
        self.max_choices = max_choices
        self.started = time.monotonic_ns()

    def read(self, body: Body, on_loop: bool) -> Answer:
        request = _READ[self.kind](body, self.max_choices)
        config = self.models.config(request.model)
        texts = self.models.text_model(request.model, config, on_loop)
        prepared = prepare(request, config, texts, request.model)
        return self.plan.make(Answer(prepared, self.started))

    def requests(self) -> list[InferenceRequest]:
        return self.plan.ready.prepared.requests


class _Choice(_Part[_Generation]):
    """The call of one choice (the data plane's StreamCodec)."""

    __slots__ = ()

    def encoder(self, request: InferenceRequest, meta: CallMeta) -> ChoicePieces | ChoiceEvents:
        return self._call.plan.ready.encoder(self._index)


# -- embeddings -------------------------------------------------------------------------------
async def embed(
    door: DataPlane, models: TextModels, max_inputs: int, body: Body, meta: CallMeta
) -> tuple[HttpHead, bytes]:
    """An embedding request's answer: one vector per input, in input order."""
    call = _Embedding(models, max_inputs)
    batches = await _calls(door.infer, lambda i: _Batch(call, i), call, body, meta)
    parts: list[np.ndarray] = await answers(batches)
    plan = call.plan.ready
    if sum(part.nbytes for part in parts) <= OFFLOAD_BYTES:
        return WHOLE, _embedding_json(plan, parts)
    # thousands of vectors: writing them takes long enough to stall every other client
    return WHOLE, await asyncio.to_thread(_embedding_json, plan, parts)


def _embedding_json(plan: EmbeddingPlan, parts: list[np.ndarray]) -> bytes:
    return orjson.dumps(embedding_answer(plan, parts))


class _Embedding(_Request[EmbeddingPlan]):
    """One embedding request."""

    __slots__ = ("max_inputs",)

    def __init__(self, models: TextModels, max_inputs: int) -> None:
        super().__init__(models, _LABELS["/v1/embeddings"])
        self.max_inputs = max_inputs

    def read(self, body: Body, on_loop: bool) -> EmbeddingPlan:
        request = read_embedding(body, self.max_inputs)
        config = self.models.config(request.model)
        texts = self.models.text_model(request.model, config, on_loop)
        return self.plan.make(plan_embedding(request, config, texts))

    def requests(self) -> list[InferenceRequest]:
        return self.plan.ready.requests


class _Batch(_Part[_Embedding]):
    """The call of one batch of inputs (the data plane's Codec): its vectors."""

    __slots__ = ()

    def encode(
        self, response: InferenceResponse, request: InferenceRequest, meta: CallMeta
    ) -> np.ndarray:
        return vectors_of(self._call.plan.ready, response)
