"""A chat or completion's answer, made of its choices' responses as the data plane hands them
over: per choice an encoder (the data plane's ``ItemEncoder``, made per call) that turns each
response into what it adds to the choice (:class:`ChoicePieces`: a whole answer's pieces) or
into its server-sent event (:class:`ChoiceEvents`); :class:`Answer` keeps what the choices
share (the timing figures, the usage) and reads the calls' streams, as one JSON object or as
events ending with ``data: [DONE]``.

A choice the server ends early (a stop sequence, ``max_tokens``) has its stream closed as
soon as its last piece is read, which cancels the model's work; a client that goes away
closes every choice's stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any, TypeVar

import orjson

from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane.codec import HttpHead
from inferplex.dataplane.streams import Streamed
from inferplex.errors import InferplexError
from inferplex.protocol.openai import encode
from inferplex.protocol.openai.choices import Choice, Piece
from inferplex.protocol.openai.errors import error_event
from inferplex.protocol.openai.fanout import give_up, merged
from inferplex.protocol.openai.generation import Prepared
from inferplex.protocol.openai.stats import GENERATION, GenerationStats, ModelGeneration

__all__ = ["EVENTS", "WHOLE", "Answer", "ChoiceEvents", "ChoicePieces"]

T = TypeVar("T")
#: a choice's call through the data plane: its stream once it has opened
Call = asyncio.Future[Streamed[HttpHead, T]]
Calls = list[Call[T]]

#: the head of a whole answer and of a streamed one
WHOLE = HttpHead(200, [(b"content-type", b"application/json")], whole=True)
EVENTS = HttpHead(
    200, [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
)


class Answer:
    """The answer to one chat or completion request: its choices as they are read."""

    def __init__(
        self, prepared: Prepared, started_ns: int, stats: GenerationStats = GENERATION
    ) -> None:
        """``started_ns``: when the request came (``time.monotonic_ns``), for the time to
        the first token."""
        self.prepared = prepared
        sampling = prepared.request.sampling
        self.choices = [
            Choice(i, sampling.max_tokens, sampling.stop, prepared.text_model)
            for i in range(len(prepared.requests))
        ]
        #: an error event was made: the stream ends with it
        self.failed = False
        self._started = started_ns
        self._stats = stats  # its table is the event loop's: read there (_figures)
        self._last: list[int | None] = [None] * len(self.choices)
        self._first_seen = False
        self._counted = False

    def encoder(self, index: int) -> ChoicePieces | ChoiceEvents:
        """The encoder of choice ``index``'s responses (the data plane's ``ItemEncoder``)."""
        if self.prepared.request.stream:
            return ChoiceEvents(self, index)
        return ChoicePieces(self, index)

    def take(self, index: int, item: StreamedResponse) -> Piece | None:
        """What a response adds to choice ``index`` (its last piece carries the finish
        reason); None: nothing yet. Raises the model's error."""
        choice = self.choices[index]
        if choice.finished:  # read before its stream was closed
            return None
        if item.error is not None:
            raise item.error
        piece = None
        if item.response is not None:
            self._time(index)
            piece = choice.take(item.response)
        if choice.done or item.final:
            tail = choice.finish()
            if piece is None:
                return tail
            piece.text += tail.text
            piece.finish_reason = tail.finish_reason
        return piece

    def echo(self, index: int) -> str:
        """What choice ``index`` begins with: its prompt, for ``echo``."""
        return self.prepared.prompts[index] if self.prepared.request.echo else ""

    async def whole(self, calls: Calls[Piece]) -> bytes:
        """The answer of a request that did not ask for a stream: every choice read whole,
        each as soon as its call has opened."""
        reads = [asyncio.ensure_future(self._read_all(i, c)) for i, c in enumerate(calls)]
        try:
            pieces = await asyncio.gather(*reads)
        finally:
            self._close(calls)  # first: a read still in flight then ends a closed call
            for read in reads:
                read.cancel()
        head = self.prepared.head
        return orjson.dumps(encode.answer(head, list(enumerate(pieces)), self.usage()))

    async def _read_all(self, index: int, call: Call[Piece]) -> Piece:
        stream = await call  # the call's refusal is the answer's error
        whole = Piece(self.echo(index))
        async for piece in stream:
            whole.text += piece.text
            whole.logprobs.extend(piece.logprobs)
            whole.finish_reason = piece.finish_reason
            if self.choices[index].finished:
                stream.close()  # the server ended it: the model stops
        if whole.finish_reason is None:  # the stream ended without a final response
            whole.text += self.choices[index].finish().text
            whole.finish_reason = self.choices[index].finish_reason
        return whole

    async def events(self, calls: Calls[bytes]) -> AsyncGenerator[bytes, None]:
        """The events of a streamed answer: each choice's as they come (a choice's once its
        call has opened), then the usage when asked for, then ``[DONE]``; an error event
        (a model's, or a call refused after the stream began) ends it. Closing it (the
        client went away) closes every choice's stream."""
        reader = merged([self._events_of(call) for call in calls])
        try:
            async for index, event in reader:
                yield event
                if self.failed:
                    return
                if self.choices[index].finished:
                    calls[index].result().close()  # the server ended it: the model stops
            if self.prepared.request.include_usage:
                yield encode.event(encode.usage_chunk(self.prepared.head, self.usage()))
            yield encode.DONE
        finally:
            self._close(calls)  # first: a read still in flight then ends a closed call
            await reader.aclose()

    async def _events_of(self, call: Call[bytes]) -> AsyncGenerator[bytes, None]:
        try:
            stream = await call
        except InferplexError as exc:
            self.failed = True
            yield error_event(exc)
            return
        async for event in stream:
            yield event

    def usage(self) -> encode.Usage:
        n = self.prepared.request.sampling.n
        prompts = []
        for p, counted in enumerate(self.prepared.prompt_tokens):
            reported = self.choices[p * n].prompt_tokens
            prompts.append(reported if reported is not None else counted)
        completion = sum(c.completion_tokens() for c in self.choices)
        return encode.Usage(sum(prompts), completion)

    def _time(self, index: int) -> None:
        """A model response for choice ``index`` now: the time to the first token of the
        request, the gap since the choice's last."""
        now = time.monotonic_ns()
        if not self._first_seen:
            self._first_seen = True
            self._figures().ttft.observe(now - self._started)
        last = self._last[index]
        if last is not None:
            self._figures().itl.observe(now - last)
        self._last[index] = now

    def _figures(self) -> ModelGeneration:
        return self._stats.of(self.prepared.head.model)

    def _close(self, calls: Calls[Any]) -> None:
        give_up(calls, Streamed.close)
        if not self._counted:
            self._counted = True
            usage = self.usage()
            figures = self._figures()
            figures.requests += 1
            figures.prompt_tokens += usage.prompt_tokens
            figures.completion_tokens += usage.completion_tokens


class ChoicePieces:
    """One choice of a whole answer: each response as the piece it adds."""

    __slots__ = ("_answer", "_index")

    def __init__(self, answer: Answer, index: int) -> None:
        self._answer = answer
        self._index = index

    def head(self, first: StreamedResponse) -> HttpHead:
        if first.error is not None:  # nothing was sent: the error is the answer
            raise first.error
        return WHOLE

    def item(self, item: StreamedResponse) -> Piece | None:
        return self._answer.take(self._index, item)

    def end(self) -> None:
        return None


class ChoiceEvents:
    """One choice of a streamed answer: each response as its ``data:`` event (a chat
    choice's first says its role; a completion's first begins with the prompt, for
    ``echo``); the model's error as an error event, the stream's last."""

    __slots__ = ("_answer", "_index", "_opened")

    def __init__(self, answer: Answer, index: int) -> None:
        self._answer = answer
        self._index = index
        self._opened = False

    def head(self, first: StreamedResponse) -> HttpHead:
        if first.error is not None:
            raise first.error
        return EVENTS

    def item(self, item: StreamedResponse) -> bytes | None:
        answer = self._answer
        if item.error is not None and not answer.choices[self._index].finished:
            answer.failed = True
            return error_event(item.error)
        piece = answer.take(self._index, item)
        if piece is None:
            return None
        first = not self._opened
        if first:
            piece.text = answer.echo(self._index) + piece.text
            self._opened = True
        request = answer.prepared.request
        chunk = encode.chunk(answer.prepared.head, self._index, piece, first, request.include_usage)
        return encode.event(chunk)

    def end(self) -> None:
        return None
