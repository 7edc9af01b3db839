"""The worker's way back to the server (``Link``): what a handler's calls to other models
(``inferplex.handler.bls``) and a decoupled model's responses go through.

Each exchange is a message and the server's answer; threads of one handler take turns (the
pipe and the worker's outgoing arena carry one exchange at a time). Most workers have one
reader of the pipe, their main thread, between batches, and the thread that holds the turn
while a batch runs. A decoupled model's worker (one with an ``outbox``, an arena of its own
to write into) has threads that send responses after ``execute`` returned, while the next
batch runs: there a reader thread (``Mailbox``) takes every message and hands batches to the
main thread and answers to whoever holds the turn.
"""

from __future__ import annotations

import queue
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
    RunBatch,
    Sent,
    Stop,
    StreamCancel,
    StreamItem,
    StreamNext,
    StreamOpen,
    StreamOpened,
    Wire,
)
from inferplex.errors import ErrorCode
from inferplex.handler import bls


class Mailbox:
    """A decoupled model's worker: the thread that reads every message of the server."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        #: batches and the stop, for the main thread (None: the server is gone)
        self.batches: queue.SimpleQueue[RunBatch | Stop | None] = queue.SimpleQueue()
        #: answers, for the thread holding the link's turn (None: the server is gone)
        self.answers: queue.SimpleQueue[object] = queue.SimpleQueue()
        threading.Thread(target=self._read, name="mailbox", daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                message = self._wire.recv()
                if isinstance(message, RunBatch | Stop):
                    self.batches.put(message)
                else:
                    self.answers.put(message)
        except (EOFError, OSError):
            self.batches.put(None)
            self.answers.put(None)


class Link:
    """The worker's way back to the server (see the module docstring)."""

    def __init__(
        self, wire: Wire, arena: Arena, outbox: Arena | None = None, mailbox: Mailbox | None = None
    ) -> None:
        self._wire = wire
        self._arena = arena
        #: where this side writes: the arena itself (after the running batch's inputs), or
        #: the outbox of a decoupled model's worker (from its start)
        self._outbox = outbox or arena
        self._mailbox = mailbox
        self._lock = threading.Lock()
        self._base = -1  # first arena offset free for calls; -1 while no request runs

    def begin(self, base: int) -> None:
        """A request whose inputs end at arena offset ``base`` starts running."""
        self._base = base

    def end(self) -> None:
        self._base = -1

    def _start(self) -> int:
        """Where this side writes now."""
        return self._base if self._outbox is self._arena else 0

    def _exchange(self, message: object) -> object:
        """Send ``message`` and wait for the server's answer (holding the turn)."""
        self._wire.send(message)
        if self._mailbox is None:
            return self._wire.recv()
        answer = self._mailbox.answers.get()
        if answer is None:
            self._mailbox.answers.put(None)  # for the next one too
            raise EOFError("the server is gone")
        return answer

    def call_many(
        self, calls: Sequence[bls.Call]
    ) -> list[dict[str, np.ndarray] | bls.ModelCallError]:
        with self._lock:
            self._running()
            sent = []
            offset = self._start()
            for call in calls:
                headers, offset = self._outbox.write(call.inputs, offset)
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
            headers = self._outbox.write(call.inputs, self._start())[0]
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
        server has queued it for the client: whether the client is still there. A worker
        with a mailbox takes responses at any time (from threads its batch left sending);
        others only while the batch runs."""
        with self._lock:
            if self._base < 0 and self._mailbox is None:
                raise RuntimeError("responses can be sent only while their request runs")
            headers = self._outbox.write(outputs, self._start())[0] if outputs else None
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
