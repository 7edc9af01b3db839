"""The worker's way back to the server (``Link``): what a handler's calls to other models
(``inferplex.handler.bls``) and a decoupled model's responses go through.

Each exchange is a message and the server's answer, read by the thread that sent it;
threads of one handler take turns (the pipe and the arena carry one exchange at a time).
Most workers' links share the worker's pipe and arena: exchanges happen only while a batch
runs, the link writing past the batch's inputs. A decoupled model's worker has threads that
send responses after ``execute`` returned, while the next batch runs: its link has a pipe
and an arena of its own (``WorkerProcess.exchange`` and ``outbox``), and writes there from
the start.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from inferplex.backends.worker.arena import Arena, Header
from inferplex.backends.worker.messages import (
    Call,
    CallAnswers,
    Calls,
    Failure,
    Response,
    Sent,
    StreamCancel,
    StreamItem,
    StreamNext,
    StreamOpen,
    StreamOpened,
    Wire,
)
from inferplex.errors import ErrorCode
from inferplex.handler import bls


class Link:
    """The worker's way back to the server (see the module docstring)."""

    def __init__(self, wire: Wire, arena: Arena, own: bool = False) -> None:
        """``own``: the pipe and arena are the link's alone (a decoupled model's worker);
        else the worker's, shared with its batches."""
        self._wire = wire
        self._arena = arena
        self._own = own
        self._lock = threading.Lock()
        self._base = -1  # first arena offset free for calls; -1 while no request runs

    def begin(self, base: int) -> None:
        """A request whose inputs end at arena offset ``base`` starts running."""
        self._base = base

    def end(self) -> None:
        self._base = -1

    def _start(self) -> int:
        """Where this side writes now."""
        return 0 if self._own else self._base

    def _exchange(self, message: object) -> object:
        """Send ``message`` and wait for the server's answer (holding the turn)."""
        self._wire.send(message)
        return self._wire.recv()

    def call_many(
        self, calls: Sequence[bls.Call]
    ) -> list[dict[str, np.ndarray] | bls.ModelCallError]:
        with self._lock:
            self._running()
            sent = []
            offset = self._start()
            for call in calls:
                headers, offset = self._arena.write(call.inputs, offset)
                sent.append(_call(call, headers))
            answers = self._exchange(Calls(tuple(sent)))
            assert isinstance(answers, CallAnswers)
            # copies: the next call reuses this part of the arena
            return [
                _call_error(answer.error)
                if answer.error is not None
                else self._arena.read(answer.outputs or [], copy=True)
                for answer in answers.answers
            ]

    def open_stream(self, call: bls.Call) -> int:
        with self._lock:
            self._running()
            headers = self._arena.write(call.inputs, self._start())[0]
            opened = self._exchange(StreamOpen(_call(call, headers)))
            assert isinstance(opened, StreamOpened)
            return opened.stream

    def next_response(self, stream: int) -> bls.Streamed:
        with self._lock:
            self._running()
            item = self._exchange(StreamNext(stream))
            assert isinstance(item, StreamItem)
            # a copy: the next message reuses this part of the arena
            outputs = None if item.outputs is None else self._arena.read(item.outputs, copy=True)
            error = None if item.error is None else _call_error(item.error)
            return bls.Streamed(outputs, error, item.final)

    def cancel_stream(self, stream: int) -> None:
        with self._lock:
            if self._base >= 0:  # else its batch ended, and the call with it
                self._wire.send(StreamCancel(stream))

    def _running(self) -> None:
        if self._base < 0:
            raise bls.ModelCallError(
                "other models can be called only while the handler runs a request "
                "(not in initialize or finalize)",
                ErrorCode.UNAVAILABLE.value,
            )

    def respond(
        self,
        number: int,
        outputs: dict[str, np.ndarray] | None,
        final: bool,
        error: Failure | None,
    ) -> bool:
        """Send one response of request ``number`` (a decoupled model's) and wait until the
        server has queued it for the client: whether the client is still there. A link of
        its own takes responses at any time (from threads a batch left sending); others
        only while the batch runs."""
        with self._lock:
            if self._base < 0 and not self._own:
                raise RuntimeError("responses can be sent only while their request runs")
            headers = self._arena.write(outputs, self._start())[0] if outputs else None
            sent = self._exchange(Response(number, headers, final, error))
            assert isinstance(sent, Sent)
            return sent.alive


def _call(call: bls.Call, inputs: list[Header]) -> Call:
    return Call(call.model_name, call.version, inputs, list(call.outputs or ()), call.timeout)


def _call_error(failure: Failure) -> bls.ModelCallError:
    """A failed call as the handler sees it (a stopped call's code is Triton's
    ``cancelled``)."""
    code = bls.STOPPED if failure.stopped else failure.code.value
    return bls.ModelCallError(failure.message, code)
