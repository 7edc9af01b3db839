"""One choice of a chat or completion as its model's responses come: the text each response
adds, cut where a ``stop`` sequence begins or where ``max_tokens`` is reached (the server
enforces both, whatever the model was told: a model that cannot take them still honours
them), the tokens counted, the log-probabilities read, the finish reason decided.

Counting (docs/openai.md, "Usage"): a response's tokens are the model's ``num_output_tokens``
where it gives them, else one per response (Triton's streaming convention: a response per
token); the choice's completion tokens at the end are the model's count, else the model's
tokenizer's count of the text, else the responses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from inferplex.protocol.openai.llm import LOGPROBS, TEXT_OUTPUT
from inferplex.protocol.openai.text_model import WORDS, TextModel
from inferplex.types import InferenceResponse


@dataclass(slots=True)
class TokenLogprob:
    """A generated token's log-probability and the top alternatives at its place."""

    token: str
    logprob: float
    top: list[tuple[str, float]]


@dataclass(slots=True)
class Piece:
    """What one step adds to a choice: text, log-probabilities, and the finish reason on the
    last."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None


class Choice:
    """The state of one choice."""

    def __init__(
        self, index: int, max_tokens: int | None, stop: list[str], text_model: TextModel
    ) -> None:
        self.index = index
        self._max_tokens = max_tokens
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1  # a stop may start in the tail
        self._text_model = text_model
        self._held = ""  # text not yet sent: it may begin a stop sequence
        self.text = ""  # everything sent
        self.responses = 0
        self.reported_tokens: int | None = None  # the model's num_output_tokens, summed
        self.prompt_tokens: int | None = None  # the model's num_input_tokens
        self.model_finish: str | None = None
        #: the server ended the choice (a stop sequence, max_tokens): the model may stop
        self.done = False
        self.finish_reason: str | None = None
        self.finished = False  # its finish was taken: nothing more is read

    @property
    def counted(self) -> int:
        """Tokens generated so far, as ``max_tokens`` counts them."""
        return self.reported_tokens if self.reported_tokens is not None else self.responses

    def take(self, response: InferenceResponse) -> Piece | None:
        """What a model response adds (None: nothing to send yet)."""
        outputs = {t.name: t.data for t in response.outputs}
        self.responses += 1
        self._read_counts(outputs)
        text = "".join(_texts(outputs.get(TEXT_OUTPUT)))
        logprobs = _logprobs(outputs.get(LOGPROBS))
        if self._max_tokens is not None and self.counted >= self._max_tokens:
            text = self._within_limit(text)
            self.done = True
            self.finish_reason = "length"
        piece = self._after_stop(text)
        piece.logprobs = logprobs
        if self.done:
            piece.text += self._flush() if self.finish_reason == "length" else ""
            piece.finish_reason = self.finish_reason
        return piece if piece.text or piece.logprobs or piece.finish_reason else None

    def finish(self) -> Piece:
        """The model sent its last response (or the server ended the choice): what was held
        back, and the finish reason."""
        self.finished = True
        if self.finish_reason is None:
            self.finish_reason = self._reason()
        return Piece(self._flush(), finish_reason=self.finish_reason)

    def completion_tokens(self) -> int:
        if self.reported_tokens is not None:
            return self.reported_tokens
        counted = self._text_model.count(self.text, special_tokens=False)
        if counted is not None:
            return counted
        return max(self.responses, len(WORDS.findall(self.text)))

    def _reason(self) -> str:
        if self.model_finish in ("stop", "length"):
            return self.model_finish
        if self._max_tokens is not None and self.counted >= self._max_tokens:
            return "length"
        return "stop"

    def _read_counts(self, outputs: dict[str, Any]) -> None:
        produced = outputs.get("num_output_tokens")
        if produced is not None:
            self.reported_tokens = (self.reported_tokens or 0) + int(np.sum(produced))
        prompt = outputs.get("num_input_tokens")
        if prompt is not None and np.size(prompt):
            self.prompt_tokens = int(np.ravel(prompt)[0])
        reason = outputs.get("finish_reason")
        if reason is not None and np.size(reason):
            found = _texts(reason)[0]
            if found not in ("", "None", "null"):
                self.model_finish = found

    def _within_limit(self, text: str) -> str:
        """The part of a response's text within ``max_tokens``: all of it, unless the
        model reported more tokens than are left and the tokenizer can cut it."""
        tokenizer = self._text_model.tokenizer
        assert self._max_tokens is not None
        over = self.counted - self._max_tokens
        if over <= 0 or tokenizer is None:
            return text
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        keep = max(0, len(ids) - over)
        self.reported_tokens = self._max_tokens
        return str(tokenizer.decode(ids[:keep], skip_special_tokens=False))

    def _after_stop(self, text: str) -> Piece:
        """The text that may be sent now: up to a stop sequence (which ends the choice), and
        without the tail that may begin one."""
        if not self._stop:
            self.text += text
            return Piece(text)
        pending = self._held + text
        cut = min((i for i in (pending.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self._held = ""
            self.done = True
            self.finish_reason = "stop"
            self.text += pending[:cut]
            return Piece(pending[:cut])
        keep = len(pending) - self._hold if self._hold else len(pending)
        self._held = pending[keep:]
        self.text += pending[:keep]
        return Piece(pending[:keep])

    def _flush(self) -> str:
        held, self._held = self._held, ""
        self.text += held
        return held


def _texts(data: Any) -> list[str]:
    if data is None:
        return []
    return [
        item.decode("utf-8", "replace") if isinstance(item, bytes) else str(item)
        for item in np.ravel(data)
    ]


def _logprobs(data: Any) -> list[TokenLogprob]:
    """vLLM's log-probabilities (a JSON list per response: per token a map of token id to
    ``{logprob, rank, decoded_token}``, the chosen token first): as tokens with their top."""
    found: list[TokenLogprob] = []
    for text in _texts(data):
        steps = orjson.loads(text) if text not in ("", "null") else None
        for step in steps or ():
            entries = list(step.values())
            if not entries:
                continue
            chosen = entries[0]
            top = sorted(entries, key=lambda e: e.get("rank") or 0)
            found.append(
                TokenLogprob(
                    str(chosen.get("decoded_token", "")),
                    float(chosen.get("logprob", 0.0)),
                    [(str(e.get("decoded_token", "")), float(e.get("logprob", 0.0))) for e in top],
                )
            )
    return found
