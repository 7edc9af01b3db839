"""A chat or completion from request to answer: :func:`prepare` turns the read request into
one InferenceRequest per choice (the chat template applied, the prompt counted and checked
against the model's context), :class:`Run` reads the choices' response streams, as a whole
answer or as server-sent events, closing a choice's stream (the model's work stops) when the
server ends it early or the client goes away."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from inferplex.config.model_config import ModelConfig
from inferplex.core.streaming import Responses, StreamedResponse
from inferplex.protocol.openai import encode
from inferplex.protocol.openai.choices import Choice, Piece
from inferplex.protocol.openai.errors import FieldError, error_event
from inferplex.protocol.openai.llm import llm_model, llm_request
from inferplex.protocol.openai.requests import Generation
from inferplex.protocol.openai.stats import GENERATION, GenerationStats
from inferplex.protocol.openai.text_model import WORDS, TextModel
from inferplex.types import InferenceRequest

#: the engine's stream of one request's responses (the data plane's ``stream``)
OpenStream = Callable[[InferenceRequest], Awaitable[Responses]]


@dataclass(slots=True)
class Prepared:
    """A request ready to run: its choices' requests and what the answer needs."""

    request: Generation
    head: encode.Head
    requests: list[InferenceRequest]
    #: the prompt of each choice (its text, for ``echo``) and the tokens of each prompt
    prompts: list[str]
    prompt_tokens: list[int]
    text_model: TextModel


def prepare(
    request: Generation, config: ModelConfig, text_model: TextModel, model_name: str
) -> Prepared:
    """The requests of ``request`` for the model ``config`` (in a worker thread for a large
    request: the template and the tokenizer take time in proportion)."""
    model = llm_model(config)
    prompts = _prompts(request, text_model)
    counts = [_count(text_model, p, request.kind == "completion") for p in prompts]
    _check_context(request, text_model, counts)
    request_id = f"{'chatcmpl' if request.kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
    sampling = request.sampling
    requests = [
        llm_request(model, prompt, sampling, request.stream, index, f"{request_id}-{p}-{index}")
        for p, prompt in enumerate(prompts)
        for index in range(sampling.n)
    ]
    head = encode.Head(request.kind, request_id, int(time.time()), model_name, sampling.logprobs)
    choice_prompts = [p for p in prompts for _ in range(sampling.n)]
    return Prepared(request, head, requests, choice_prompts, counts, text_model)


def _prompts(request: Generation, text_model: TextModel) -> list[str]:
    if request.kind == "chat":
        if text_model.template is None:
            raise FieldError(
                "messages",
                f"model '{request.model}' has no chat template: give it one as 'chat_template' "
                "in its tokenizer_config.json or as a chat_template.jinja file in its folder, "
                "or use /v1/completions",
            )
        return [text_model.render(request.messages)]
    prompts = []
    for index, prompt in enumerate(request.prompts):
        if isinstance(prompt, str):
            prompts.append(prompt)
            continue
        text = text_model.decode(prompt)
        if text is None:
            raise FieldError(
                f"prompt[{index}]" if len(request.prompts) > 1 else "prompt",
                f"model '{request.model}' has no tokenizer.json: its prompts must be text, "
                "not token ids",
            )
        prompts.append(text)
    return prompts


def _count(text_model: TextModel, prompt: str, special: bool) -> int:
    """Tokens of a prompt: by the model's tokenizer, else its words and punctuation marks
    (an estimate, docs/openai.md "Usage")."""
    counted = text_model.count(prompt, special_tokens=special)
    return counted if counted is not None else len(WORDS.findall(prompt))


def _check_context(request: Generation, text_model: TextModel, counts: list[int]) -> None:
    limit = text_model.context_length
    if limit is None or text_model.tokenizer is None:
        return
    wanted = request.sampling.max_tokens or 0
    field = "messages" if request.kind == "chat" else "prompt"
    for count in counts:
        if count + wanted > limit:
            asked = f" + {wanted} of 'max_tokens'" if wanted else ""
            raise FieldError(
                field if count >= limit or not wanted else "max_tokens",
                f"model '{request.model}' has a context of {limit} tokens; this request asks "
                f"for {count + wanted}: {count} in the {field}{asked}",
                "context_length_exceeded",
            )


class Run:
    """The choices of a prepared request, read from their streams."""

    def __init__(
        self, prepared: Prepared, started_ns: int, stats: GenerationStats = GENERATION
    ) -> None:
        self._prepared = prepared
        self._sampling = prepared.request.sampling
        self._choices = [
            Choice(i, self._sampling.max_tokens, self._sampling.stop, prepared.text_model)
            for i in range(len(prepared.requests))
        ]
        self._streams: list[Responses] = []
        self._started = started_ns
        self._figures = stats.of(prepared.head.model)
        self._last: list[int | None] = [None] * len(self._choices)
        self._first_seen = False

    async def open(self, open_stream: OpenStream) -> None:
        """Send every choice's request; an error before any response is the answer's."""
        try:
            for request in self._prepared.requests:
                self._streams.append(await open_stream(request))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for stream in self._streams:
            stream.close()

    async def whole(self) -> dict[str, object]:
        """The answer of a request that did not ask for a stream."""
        try:
            pieces = await asyncio.gather(*(self._read_all(i) for i in range(len(self._streams))))
        finally:
            self.close()
            self._count_usage()
        return encode.answer(self._prepared.head, list(enumerate(pieces)), self.usage())

    async def _read_all(self, index: int) -> Piece:
        choice = self._choices[index]
        whole = Piece(self._echo(index))
        async for item in self._streams[index]:
            piece = self._take(index, item)
            if piece is not None:
                whole.text += piece.text
                whole.logprobs.extend(piece.logprobs)
            if choice.done:
                self._streams[index].close()
                break
        whole.text += choice.finish().text
        whole.finish_reason = choice.finish_reason
        return whole

    async def first(self) -> StreamedResponse | None:
        """The first item of the first choice (an error there is the request's answer)."""
        first = await anext(self._streams[0], None)
        if first is not None and first.error is not None:
            self.close()
            raise first.error
        return first

    async def events(self, first: StreamedResponse | None) -> AsyncGenerator[bytes, None]:
        """The stream's events: each choice's pieces as they come, then its finish, the
        usage when asked for, and ``[DONE]``. Closing it (the client went away) closes the
        choices' streams."""
        head = self._prepared.head
        usage = self._prepared.request.include_usage
        opened = [False] * len(self._choices)
        try:
            async for index, item in _merged(self._streams, first):
                choice = self._choices[index]
                if choice.finished:  # read before the server ended it
                    continue
                if item.error is not None:
                    yield error_event(item.error)
                    return
                piece = self._take(index, item)
                if choice.done or (item.final and choice.finish_reason is None):
                    tail = choice.finish()
                    piece = _joined(piece, tail)
                    self._streams[index].close()
                if piece is None:
                    continue
                if not opened[index]:
                    piece.text = self._echo(index) + piece.text
                yield encode.event(encode.chunk(head, index, piece, not opened[index], usage))
                opened[index] = True
            if usage:
                yield encode.event(encode.usage_chunk(head, self.usage()))
            yield encode.DONE
        finally:
            self.close()
            self._count_usage()

    def _take(self, index: int, item: StreamedResponse) -> Piece | None:
        if item.error is not None:
            raise item.error
        if item.response is None:
            return None
        now = time.monotonic_ns()
        if not self._first_seen:
            self._first_seen = True
            self._figures.ttft.observe(now - self._started)
        last = self._last[index]
        if last is not None:
            self._figures.itl.observe(now - last)
        self._last[index] = now
        return self._choices[index].take(item.response)

    def _echo(self, index: int) -> str:
        return self._prepared.prompts[index] if self._prepared.request.echo else ""

    def usage(self) -> encode.Usage:
        n = self._sampling.n
        prompts = []
        for p, counted in enumerate(self._prepared.prompt_tokens):
            reported = self._choices[p * n].prompt_tokens
            prompts.append(reported if reported is not None else counted)
        completion = sum(c.completion_tokens() for c in self._choices)
        return encode.Usage(sum(prompts), completion)

    def _count_usage(self) -> None:
        if self._figures is None:
            return
        usage = self.usage()
        self._figures.requests += 1
        self._figures.prompt_tokens += usage.prompt_tokens
        self._figures.completion_tokens += usage.completion_tokens
        self._figures = None  # type: ignore[assignment]  # counted once


def _joined(piece: Piece | None, tail: Piece) -> Piece:
    if piece is None:
        return tail
    piece.text += tail.text
    piece.finish_reason = tail.finish_reason
    return piece


async def _merged(
    streams: list[Responses], first: StreamedResponse | None
) -> AsyncGenerator[tuple[int, StreamedResponse], None]:
    """The items of several streams as they come, with their stream's index (``first``:
    the first stream's first item, already read)."""
    if first is not None:
        yield 0, first
    reading = [i for i in range(len(streams)) if i or first is None or not first.final]
    if len(streams) == 1:
        if reading:
            async for item in streams[0]:
                yield 0, item
        return
    async for found in _interleaved(streams, reading):
        yield found


async def _interleaved(
    streams: list[Responses], reading: list[int]
) -> AsyncGenerator[tuple[int, StreamedResponse], None]:
    """The items of the streams ``reading`` as they come; one read in flight per stream, so
    each stream's back-pressure holds."""
    pending = {asyncio.ensure_future(anext(streams[i], None)): i for i in reading}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                item = future.result()
                if item is None:
                    continue
                yield index, item
                if not item.final:
                    pending[asyncio.ensure_future(anext(streams[index], None))] = index
    finally:
        for future in pending:
            future.cancel()
