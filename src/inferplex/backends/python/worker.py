"""The worker process that runs one instance of a Python model (or of an isolated model's
backend, when the init message names a ``loader``).

    python -m inferplex.backends.python.worker CONNECTION ARENA CANCEL OUTBOX EXCHANGE

The server starts it with a socket (``multiprocessing.connection`` framing), the arena's
file descriptor and, for a Python model, its cancel board's (``backends/worker/cancel.py``: how
a running handler learns that a request's caller went away, without a message); for a
decoupled model, an arena and a socket of its link's own (``link.py``); -1 where there is
none.
The messages both ways are ``backends/worker/messages.py``'s; tensors stay in the arenas.

It imports only numpy and the few modules of this package it needs (not the server, not the
config models: the ``__init__`` of ``backends`` and ``backends/python`` import lazily for it),
so it starts fast; it exits when the server says stop or goes away.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from inferplex.backends.python import compat
from inferplex.backends.python.link import Link
from inferplex.backends.python.runner import HandlerRunner, find_class, load_module
from inferplex.backends.python.styles import make_runner
from inferplex.backends.worker.arena import Arena
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.backends.worker.messages import (
    BatchDone,
    BatchFailed,
    Failure,
    Init,
    LoadFailed,
    MetricUpdates,
    Ready,
    RunBatch,
    Stop,
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


def serve(
    connection: Wire,
    arena: Arena,
    board: CancelBoard | None = None,
    link: Link | None = None,
) -> int:
    """The worker's life: initialise, then run batches until told to stop. ``link``: one of
    its own (a decoupled model's: threads the model started may send responses between
    batches, ``link.py``); else the link shares ``connection`` and ``arena``."""
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
    overlaps = link is not None
    link = link or Link(connection, arena)
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
                reply = run_batch(batch, runner, arena, board, link, model_dir, overlaps)
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
    overlaps: bool = False,
) -> BatchDone | BatchFailed:
    """Run one batch; its answer. ``overlaps``: the batch's requests may outlive it (a
    decoupled model's threads), so its inputs are copied out of the arena, where the next
    batch's go."""
    base = Arena.end(batch.inputs)
    link.begin(base)
    cancelled: Callable[[int], bool] = never
    try:
        inputs = arena.read(batch.inputs, copy=overlaps)
        if not batch.requests:
            return BatchDone(arena.write(runner.run(inputs, batch.outputs), base)[0])
        # who asked for which rows: a handler may fail one request alone. Only a handler's
        # runner gets them (an isolated model's batches have none); no isinstance: an ABC's
        # costs a Python call per batch.
        handler = cast(HandlerRunner, runner)
        if board is not None:
            cancelled = board.checker(batch.number)
        requests = batch.requests
        result = handler.run_requests(inputs, batch.outputs, requests, cancelled, link.respond)
        outputs = arena.write(result.outputs, base)[0]
        return BatchDone(outputs, tuple(result.failed), result.still_open)
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
    # -1: none (a model without a cancel board; a link that shares the pipe and arena)
    board = CancelBoard(int(args[2])) if int(args[2]) >= 0 else None
    link = None
    if int(args[3]) >= 0:
        link = Link(Wire(Connection(int(args[4]))), Arena(int(args[3])), own=True)
    return serve(connection, arena, board, link)


if __name__ == "__main__":
    sys.exit(main())
