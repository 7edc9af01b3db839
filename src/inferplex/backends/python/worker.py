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
                    ("result", headers) | ("error", code, message)   answers to a worker's call
                    ("stop",)
  worker -> server  ("infer", model, version, headers, output names, timeout)   a call (BLS)

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
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from inferplex.backends.python.runner import Runner, find_class, load_module
from inferplex.backends.worker.arena import Arena
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.errors import ErrorCode, InferplexError
from inferplex.handler import bls
from inferplex.handler.base import Context, never


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
    handler = find_class(module, init["handler_class"])()
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
    """The worker's way back to the server while a request runs. Calls from several threads
    of one handler take turns: the pipe and the arena carry one call at a time."""

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

    def call(
        self,
        model_name: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None,
        version: str,
        timeout: float | None,
    ) -> dict[str, np.ndarray]:
        with self._lock:
            if self._base < 0:
                raise bls.ModelCallError(
                    "other models can be called only while the handler runs a request "
                    "(not in initialize or finalize)",
                    "unavailable",
                )
            headers, _ = self._arena.write(inputs, self._base)
            self._connection.send(
                ("infer", model_name, version, headers, list(outputs or ()), timeout)
            )
            reply = self._connection.recv()
            if reply[0] == "error":
                raise bls.ModelCallError(reply[2], reply[1])
            # copies: the next call reuses this part of the arena
            return self._arena.read(reply[1], copy=True)


def serve(connection: Connection, arena: Arena, board: CancelBoard | None = None) -> int:
    """The worker's life: initialise, then run batches until told to stop."""
    _, init = connection.recv()
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
                    inputs, outputs, requests, cancelled
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
        connection.send(reply)
    runner.finalize()
    return 0


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
