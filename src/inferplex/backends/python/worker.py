"""The worker process that runs one instance of a Python model (or of an isolated model's
backend, when the init message names a ``loader``).

    python -m inferplex.backends.python.worker CONNECTION_FD ARENA_FD [CANCEL_FD]

The server starts it with a socket (``multiprocessing.connection`` framing), the arena's
file descriptor and, for a Python model, its cancel board's (``backends/worker/cancel.py``: how
a running handler learns that a request's caller went away, without a message).
Messages are small tuples; tensors stay in the arena:

  server -> worker  ("init", {...})                         then "ready" or ("failed", why)
                    ("run", headers, output names)          then ("done", headers) or
                                                            ("error", why, error code)
                    ("run", headers, output names, requests, number)   a Python model's
                                                            batch number ``number`` with
                                                            [(id, parameters, rows)] per
                                                            request: ("done", headers,
                                                            [(index, why, code)] that failed)
                    ("result", [("result", headers) | ("error", code, message)])
                                                            answers to a worker's calls
                    ("sent", alive)                         answer to a response: queued
                                                            for its client (still there?)
                    ("stop",)
  worker -> server  ("infer", [(model, version, headers, output names, timeout)])   calls
                                                            (BLS), run at once
                    ("metrics", updates)                    custom metric changes, ahead of
                                                            "ready" and of an answer
                    ("response", index, headers or None, final, (why, code) or None)
                                                            a decoupled model's response to
                                                            request ``index`` of the batch
                    StreamOpen / StreamNext / StreamCancel  calls whose responses the
                                                            handler reads as they come
                                                            (``stream_messages.py``)

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
from typing import Any, Protocol, cast

import numpy as np

from inferplex.backends.python import compat
from inferplex.backends.python.runner import Runner, find_class, load_module
from inferplex.backends.worker.arena import Arena
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.backends.worker.stream_messages import (
    StreamCancel,
    StreamItem,
    StreamNext,
    StreamOpen,
    StreamOpened,
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


def load(init: dict[str, Any]) -> Runner:
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
    handler = found()
    return Runner(handler, context)


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

    def __init__(self, connection: Connection, arena: Arena) -> None:
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
                outputs = list(call.outputs or ())
                sent.append((call.model_name, call.version, headers, outputs, call.timeout))
            self._connection.send(("infer", sent))
            _, answers = self._connection.recv()
            # copies: the next call reuses this part of the arena
            return [
                bls.ModelCallError(answer[2], answer[1])
                if answer[0] == "error"
                else self._arena.read(answer[1], copy=True)
                for answer in answers
            ]

    def open_stream(self, call: bls.Call) -> int:
        with self._lock:
            self._running()
            headers = self._arena.write(call.inputs, self._base)[0]
            outputs = list(call.outputs or ())
            self._connection.send(
                StreamOpen(call.model_name, call.version, headers, outputs, call.timeout)
            )
            opened: StreamOpened = self._connection.recv()
            return opened.stream

    def next_response(self, stream: int) -> bls.Streamed:
        with self._lock:
            self._running()
            self._connection.send(StreamNext(stream))
            item: StreamItem = self._connection.recv()
            # a copy: the next message reuses this part of the arena
            outputs = None if item.outputs is None else self._arena.read(item.outputs, copy=True)
            error = None if item.error is None else bls.ModelCallError(item.error[1], item.error[0])
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
                "unavailable",
            )

    def respond(
        self,
        index: int,
        outputs: dict[str, np.ndarray] | None,
        final: bool,
        error: tuple[str, str] | None,
    ) -> bool:
        """Send one response of request ``index`` of the running batch (a decoupled model's)
        and wait until the server has queued it for the client: whether the client is still
        there."""
        with self._lock:
            if self._base < 0:
                raise RuntimeError("responses can be sent only while their request runs")
            headers = self._arena.write(outputs, self._base)[0] if outputs else None
            self._connection.send(("response", index, headers, final, error))
            alive: bool = self._connection.recv()[1]
            return alive


def serve(connection: Connection, arena: Arena, board: CancelBoard | None = None) -> int:
    """The worker's life: initialise, then run batches until told to stop."""
    _, init = connection.recv()
    configure_logging(*init.get("log", LOG_DEFAULT))
    model_dir = str(Path(init["model_file"]).parent)
    runner: Loaded
    try:
        runner = loader(init)(init)
    except Exception as exc:
        traceback.print_exc()
        connection.send(("failed", describe(exc, model_dir)))
        return 1
    link = Link(connection, arena)
    bls.install(link)
    send_metrics(connection)
    connection.send(("ready",))
    while True:
        try:
            message = connection.recv()
        except EOFError:  # the server is gone
            return 0
        if message[0] == "stop":
            break
        _, headers, outputs, *batch = message
        base = Arena.end(headers)
        link.begin(base)
        cancelled: Callable[[int], bool] = never
        try:
            inputs = arena.read(headers, copy=False)
            if batch:  # who asked for which rows: a handler may fail one request alone
                requests, number = batch
                if board is not None:
                    cancelled = board.checker(number)
                results, failed = cast(Runner, runner).run_requests(
                    inputs, outputs, requests, cancelled, link.respond
                )
                reply: tuple[Any, ...] = ("done", arena.write(results, base)[0], failed)
            else:
                reply = ("done", arena.write(runner.run(inputs, outputs), base)[0])
        except InferplexError as exc:  # a clear message with its code (a bad input, say)
            reply = ("error", exc.message, exc.code.value)
        except Exception as exc:
            # a handler that gives up on a batch nobody waits for any more is no error to log
            if not (batch and all(cancelled(i) for i in range(len(batch[0])))):
                traceback.print_exc()
            reply = ("error", describe(exc, model_dir), ErrorCode.INTERNAL.value)
        finally:
            link.end()
        send_metrics(connection)
        connection.send(reply)
    runner.finalize()
    return 0


def send_metrics(connection: Connection) -> None:
    """The custom metrics the handler changed since the last answer, in one message ahead
    of the next (none when nothing changed)."""
    updates = metrics.drain()
    if updates:
        connection.send(("metrics", updates))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C in a terminal reaches the whole process group: the server decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    connection = Connection(int(args[0]))
    arena = Arena(int(args[1]))
    board = CancelBoard(int(args[2])) if len(args) > 2 else None
    return serve(connection, arena, board)


if __name__ == "__main__":
    sys.exit(main())
