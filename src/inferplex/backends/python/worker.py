"""The worker process that runs one instance of a Python model (or of an isolated model's
backend, when the init message names a ``loader``).

    python -m inferplex.backends.python.worker CONNECTION_FD ARENA_FD [CANCEL_FD]

The server starts it with a socket (``multiprocessing.connection`` framing), the arena's
file descriptor and, for a Python model, its cancel board's (``backends/worker/cancel.py``: how
a running handler learns that a request's caller went away, without a message). The
messages both ways are ``backends/worker/messages.py``'s; tensors stay in the arena.

It imports only numpy and the few modules of this package it needs (not the server, not the
config models: the ``__init__`` of ``backends`` and ``backends/python`` import lazily for it),
so it starts fast; it exits when the server says stop or goes away.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from inferplex.backends.python import compat
from inferplex.backends.python.runner import HandlerRunner, find_class, load_module, make_runner
from inferplex.backends.worker.arena import Arena, Header
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.backends.worker.messages import (
    BatchDone,
    BatchFailed,
    Call,
    CallAnswers,
    Calls,
    Failure,
    Init,
    LoadFailed,
    MetricUpdates,
    Ready,
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
from inferplex.errors import ErrorCode, InferplexError
from inferplex.handler import bls, metrics
from inferplex.handler.base import Context, never
from inferplex.logging_setup import configure_logging

#: the log level and format of a worker whose init names none (the server's level, format and
#: file are in "log": a handler's Logger lines reach the server's log as its own do)
LOG_DEFAULT = ("info", "plain")


def describe(exc: BaseException, model_dir: str) -> str:
    """``Type: message (model.py line N, in function)`` — where in the user's files it broke."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(model_dir):
            where = f" ({Path(frame.filename).name} line {frame.lineno}, in {frame.name})"
    text = str(exc) or "(no message)"
    return f"{type(exc).__name__}: {text}{where}"


class Loaded(Protocol):
    """What a loader returns: a model that runs batches (a handler's ``Runner``)."""

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """One batch: input name -> array in, the requested outputs out."""
        ...

    def finalize(self) -> None:
        """The worker is about to exit."""
        ...


def load(init: dict[str, Any]) -> HandlerRunner:
    model_file = Path(init["model_file"])
    context = Context(
        model_name=init["model_name"],
        model_version=init["model_version"],
        model_dir=str(model_file.parent),
        config=init["config"],
        instance_name=init["instance_name"],
        instance_kind=init["instance_kind"],
        device_id=init["device_id"],
    )
    module = load_module(model_file)
    found = find_class(module, init["handler_class"])
    compat.check(model_file, found)
    return make_runner(found(), context)


def loader(init: dict[str, Any]) -> Callable[[dict[str, Any]], Loaded]:
    """A handler's ``load``, unless ``init`` names another loader as ``"module:function"``
    (an isolated model's backend); imported only then, so a handler's worker starts fast."""
    target = init.get("loader")
    if not target:
        return load
    module, _, name = target.partition(":")
    found: Callable[[dict[str, Any]], Loaded] = getattr(importlib.import_module(module), name)
    return found


class Link:
    """The worker's way back to the server while a request runs. A message carries one call
    or several (an async handler's gathered ``async_exec``: the server runs them at once);
    messages from several threads of one handler take turns: the pipe and the arena carry
    one at a time."""

    def __init__(self, connection: Wire, arena: Arena) -> None:
        self._connection = connection
        self._arena = arena
        self._lock = threading.Lock()
        self._base = -1  # first arena offset free for calls; -1 while no request runs

    def begin(self, base: int) -> None:
        """A request whose inputs end at arena offset ``base`` starts running."""
        self._base = base

    def end(self) -> None:
        self._base = -1

    def call_many(
        self, calls: Sequence[bls.Call]
    ) -> list[dict[str, np.ndarray] | bls.ModelCallError]:
        with self._lock:
            self._running()
            sent = []
            offset = self._base
            for call in calls:
                headers, offset = self._arena.write(call.inputs, offset)
                sent.append(_call(call, headers))
            self._connection.send(Calls(tuple(sent)))
            answers: CallAnswers = self._connection.recv()
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
            headers = self._arena.write(call.inputs, self._base)[0]
            self._connection.send(StreamOpen(_call(call, headers)))
            opened: StreamOpened = self._connection.recv()
            return opened.stream

    def next_response(self, stream: int) -> bls.Streamed:
        with self._lock:
            self._running()
            self._connection.send(StreamNext(stream))
            item: StreamItem = self._connection.recv()
            # a copy: the next message reuses this part of the arena
            outputs = None if item.outputs is None else self._arena.read(item.outputs, copy=True)
            error = None if item.error is None else _call_error(item.error)
            return bls.Streamed(outputs, error, item.final)

    def cancel_stream(self, stream: int) -> None:
        with self._lock:
            if self._base >= 0:  # else its batch ended, and the call with it
                self._connection.send(StreamCancel(stream))

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
        """Send one response of request ``number`` of the running batch (a decoupled
        model's) and wait until the server has queued it for the client: whether the client
        is still there."""
        with self._lock:
            if self._base < 0:
                raise RuntimeError("responses can be sent only while their request runs")
            headers = self._arena.write(outputs, self._base)[0] if outputs else None
            self._connection.send(Response(number, headers, final, error))
            sent: Sent = self._connection.recv()
            return sent.alive


def _call(call: bls.Call, inputs: list[Header]) -> Call:
    return Call(call.model_name, call.version, inputs, list(call.outputs or ()), call.timeout)


def _call_error(failure: Failure) -> bls.ModelCallError:
    """A failed call as the handler sees it (a stopped call's code is Triton's
    ``cancelled``)."""
    code = bls.STOPPED if failure.stopped else failure.code.value
    return bls.ModelCallError(failure.message, code)


def serve(connection: Wire, arena: Arena, board: CancelBoard | None = None) -> int:
    """The worker's life: initialise, then run batches until told to stop."""
    init: Init = connection.recv()
    settings = init.settings
    configure_logging(*settings.get("log", LOG_DEFAULT))
    model_dir = str(Path(settings["model_file"]).parent)
    runner: Loaded
    try:
        runner = loader(settings)(settings)
    except Exception as exc:
        traceback.print_exc()
        connection.send(LoadFailed(describe(exc, model_dir)))
        return 1
    link = Link(connection, arena)
    bls.install(link)
    send_metrics(connection)
    connection.send(Ready())
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the server is gone
            return 0
        match message:
            case RunBatch() as batch:
                reply = run_batch(batch, runner, arena, board, link, model_dir)
            case Stop():
                break
            case other:
                raise RuntimeError(f"unexpected message {type(other).__name__} between batches")
        send_metrics(connection)
        connection.send(reply)
    runner.finalize()
    return 0


def run_batch(
    batch: RunBatch,
    runner: Loaded,
    arena: Arena,
    board: CancelBoard | None,
    link: Link,
    model_dir: str,
) -> BatchDone | BatchFailed:
    """Run one batch; its answer."""
    base = Arena.end(batch.inputs)
    link.begin(base)
    cancelled: Callable[[int], bool] = never
    try:
        inputs = arena.read(batch.inputs, copy=False)
        if not batch.requests:
            return BatchDone(arena.write(runner.run(inputs, batch.outputs), base)[0])
        # who asked for which rows: a handler may fail one request alone
        assert isinstance(runner, HandlerRunner)
        if board is not None:
            cancelled = board.checker(batch.number)
        result = runner.run_requests(inputs, batch.outputs, batch.requests, cancelled, link.respond)
        return BatchDone(arena.write(result.outputs, base)[0], tuple(result.failed))
    except InferplexError as exc:  # a clear message with its code (a bad input, say)
        return BatchFailed(Failure.of(exc))
    except Exception as exc:
        # a handler that gives up on a batch nobody waits for any more is no error to log
        if not (batch.requests and all(cancelled(i) for i in range(len(batch.requests)))):
            traceback.print_exc()
        return BatchFailed(Failure(ErrorCode.INTERNAL, describe(exc, model_dir)))
    finally:
        link.end()


def send_metrics(connection: Wire) -> None:
    """The custom metrics the handler changed since the last answer, in one message ahead
    of the next (none when nothing changed)."""
    updates = metrics.drain()
    if updates:
        connection.send(MetricUpdates(updates))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C in a terminal reaches the whole process group: the server decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    connection = Wire(Connection(int(args[0])))
    arena = Arena(int(args[1]))
    board = CancelBoard(int(args[2])) if len(args) > 2 else None
    return serve(connection, arena, board)


if __name__ == "__main__":
    sys.exit(main())
