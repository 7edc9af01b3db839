"""From the engine's thread to the clients: the engine drops each request's pieces into the
batch's outbox (never waiting), and the instance's thread, which waits for the batch anyway,
sends them on to the requests' response sinks. A sink whose reader is behind holds up that
thread only: the engine goes on, and the pieces that pile up meanwhile go out as one
response."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from inferplex.backends.base import RequestOutcome, ResponseSink
from inferplex.backends.llm.generation import Piece
from inferplex.backends.llm.request import GenerateRequest


class Outbox:
    """The pieces of one batch's requests not yet sent, by request index."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._pieces: dict[int, list[Piece]] = {}

    def deliver_to(self, index: int) -> Callable[[Piece], None]:
        """What the engine calls with request ``index``'s pieces."""

        def deliver(piece: Piece) -> None:
            with self._cond:
                self._pieces.setdefault(index, []).append(piece)
                self._cond.notify()

        return deliver

    def take(self) -> dict[int, list[Piece]]:
        """Every piece waiting (at least one request's; waits for some)."""
        with self._cond:
            while not self._pieces:
                self._cond.wait()
            pieces, self._pieces = self._pieces, {}
        return pieces


@dataclass(slots=True)
class Reply:
    """One request's side of the relay: what it asked for and what it got so far."""

    request: GenerateRequest
    prompt_tokens: int
    sink: ResponseSink | None
    #: text not yet sent (a request that does not stream gets it all at the end)
    text: str = ""
    tokens: int = 0
    outcome: RequestOutcome = field(default_factory=dict)
    done: bool = False

    def take(self, pieces: list[Piece]) -> bool:
        """Add pieces; send what is due. False when the client went away."""
        for piece in pieces:
            self.text += piece.text
            self.tokens += piece.tokens
            if piece.error is not None:
                self.outcome, self.done = piece.error, True
                return True
        last = pieces[-1]
        self.done = last.final
        if self.request.stream and self.sink is not None:
            outputs = self._outputs(last.finish_reason)
            self.text, self.tokens = "", 0
            return self.sink.send(outputs, self.done)
        if not self.done:
            return True
        if not self.request.exclude_input:
            self.text = self.request.prompt + self.text
        outputs = self._outputs(last.finish_reason)
        if self.sink is None:  # a unary call: the batch's answer
            self.outcome = outputs
            return True
        return self.sink.send(outputs, True)

    def _outputs(self, finish_reason: str | None) -> dict[str, np.ndarray]:
        request = self.request
        outputs = {"text_output": np.array([self.text.encode()], dtype=np.object_)}
        if request.return_finish_reason:
            reason = (finish_reason or "").encode()
            outputs["finish_reason"] = np.array([reason], dtype=np.object_)
        if request.return_input_tokens:
            outputs["num_input_tokens"] = np.array([self.prompt_tokens], dtype=np.uint32)
        if request.return_output_tokens:
            outputs["num_output_tokens"] = np.array([self.tokens], dtype=np.uint32)
        return outputs
