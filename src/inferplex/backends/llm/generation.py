"""One request inside the engine: its sequence, sampling settings, output text and where
its pieces of output go; ``accept`` takes each sampled token and says what to send and
whether the request is done (a stop token, a stop string, max_tokens)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferplex.backends.llm.params import SamplingParams, SamplingRow
from inferplex.backends.llm.policy import Sequence
from inferplex.backends.llm.text import OutputText
from inferplex.errors import InferplexError

if TYPE_CHECKING:
    import torch

#: why a request ended, as OpenAI and vLLM name it ("abort": its client went away)
STOP, LENGTH, ABORT = "stop", "length", "abort"


@dataclass(slots=True)
class Piece:
    """Output for the request's client: new text, the tokens it covers, and on the last
    piece why the request ended (or the error that ended it)."""

    text: str
    tokens: int
    finish_reason: str | None = None
    error: InferplexError | None = None

    @property
    def final(self) -> bool:
        return self.finish_reason is not None or self.error is not None


class Generation:
    """A request being generated (its state is the engine thread's alone)."""

    __slots__ = (
        *("_stops", "deliver", "finish_reason", "generated", "generator", "max_tokens"),
        *("params", "seq", "text", "arrival", "last_token"),
    )

    def __init__(
        self,
        seq: Sequence,
        params: SamplingParams,
        max_tokens: int,
        text: OutputText,
        eos: tuple[int, ...],
        generator: torch.Generator,
        deliver: Callable[[Piece], None],
    ) -> None:
        self.seq = seq
        self.params = params
        self.max_tokens = max_tokens
        self.text = text
        self.generator = generator
        #: where pieces go (called in the engine's thread: must not block)
        self.deliver = deliver
        self._stops = frozenset(params.stop_token_ids) | (
            frozenset() if params.ignore_eos else frozenset(eos)
        )
        self.generated = 0
        self.finish_reason: str | None = None
        #: perf_counter when the engine got it, and when its last token was sampled (the
        #: engine's time-to-first-token and inter-token-latency histograms)
        self.arrival = 0.0
        self.last_token = 0.0

    def sampling_row(self) -> SamplingRow:
        seq = self.seq
        penalised = self.params.penalised
        return SamplingRow(
            self.params,
            self.generator,
            seq.tokens[: seq.prompt_len] if penalised else (),
            seq.tokens[seq.prompt_len :] if penalised else (),
            tuple(self._stops) if self.generated < self.params.min_tokens else (),
        )

    def accept(self, token: int) -> Piece:
        """The next token is ``token``: the text it adds, and whether the request ends."""
        self.generated += 1
        if token in self._stops:
            return self._end(STOP, "")
        delta = self.text.add(token)
        if self.text.stopped_by is not None:
            return self._end(STOP, delta)
        if self.generated >= self.max_tokens:
            return self._end(LENGTH, delta)
        return Piece(delta, 1)

    def _end(self, reason: str, delta: str) -> Piece:
        self.finish_reason = reason
        return Piece(delta + self.text.flush(), 1, reason)
