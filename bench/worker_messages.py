"""What the worker protocol's messages cost one small request: the server's ``RunBatch`` with
one ``RequestInfo`` to the worker and its ``BatchDone`` back, in three encodings side by side
in one run.

    python -m bench.worker_messages [--rounds N] [--calls N] [--against REV]

- ``tuples (60c23ba)``: the string-tagged tuples the protocol had before it was typed,
  ``("run", headers, outputs, [(id, parameters, rows)], number)`` and
  ``("done", headers, failed)``, reproduced here;
- ``messages REV``: ``messages.py`` as it was at commit ``REV`` (read with ``git show``;
  left out outside a git checkout), by default the frozen dataclasses first merged;
- ``messages (this tree)``: ``inferplex.backends.worker.messages`` as it is now.

Three figures each, per request, in µs of this thread's CPU time (``thread_time_ns``: what
the other processes of a busy machine take is not counted):

- ``build+read``: make the messages a request needs and read every field of them, as the
  receivers do (no wire);
- ``encode``: the same plus the encoding both ways (packed and pickled as its wire does:
  ``ForkingPickler``, which ``Connection.send`` uses, for the first two; ``pickle.dumps``
  for this tree's), in process;
- ``round trip``: the same through a socket pair (``multiprocessing.connection``, or this
  tree's ``Wire`` over it, as the worker's pipe), both ends in this thread: what one request
  costs the two processes together.

Rounds are interleaved; each figure is the median of the rounds, with the best in brackets.
"""

from __future__ import annotations

import argparse
import importlib.util
import pickle
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import ModuleType
from typing import Any

from inferplex.backends.worker import messages as current

#: the dataclass messages first merged (the cost this bench was written to find)
DEFAULT_AGAINST = "2edb990"
HEADERS = [("INPUT0", "<f4", (1, 16), 0, 64), ("INPUT1", "<f4", (1, 16), 64, 64)]
OUT_HEADERS = [("OUTPUT0", "<f4", (1, 16), 128, 64), ("OUTPUT1", "<f4", (1, 16), 192, 64)]
OUTPUTS = ["OUTPUT0", "OUTPUT1"]
PARAMETERS: dict[str, Any] = {}

#: one request's messages: (build and read them, and send each through ``carry``)
Trip = Callable[[Callable[[Any], Any], Callable[[Any], Any]], int]


def tuple_trip(to_worker: Callable[[Any], Any], to_server: Callable[[Any], Any]) -> int:
    """The tagged tuples of 60c23ba, as its server and worker built and read them."""
    meta = [("1", PARAMETERS, 1)]
    message = to_worker(("run", HEADERS, OUTPUTS, meta, 7))
    # the worker
    if message[0] == "stop":
        return 0
    _, headers, outputs, *batch = message
    requests, number = batch
    rows = 0
    for _id, _parameters, count in requests:
        rows += count
    reply = to_server(("done", OUT_HEADERS, []))
    # the server (its receive loop, then _exchange's checks)
    if type(reply) is not tuple or reply[0] == "metrics":
        return 0
    if reply[0] == "done":
        done = tuple(reply)
        return len(done[1]) + len(done[2]) + rows + len(headers) + len(outputs) + number
    return 0


def typed_trip(module: Any) -> Trip:
    """A request's messages of a messages module (its classes' names and fields), as the
    server and the worker build and read them now."""
    info_cls, run_cls, done_cls = module.RequestInfo, module.RunBatch, module.BatchDone
    updates_cls, stop_cls = module.MetricUpdates, module.Stop

    def trip(to_worker: Callable[[Any], Any], to_server: Callable[[Any], Any]) -> int:
        infos = (info_cls(3, "1", PARAMETERS, 1),)
        message = to_worker(run_cls(HEADERS, OUTPUTS, infos, 7))
        # the worker
        match message:
            case run_cls() as batch:
                pass
            case stop_cls():
                return 0
        rows = 0
        for info in batch.requests:
            rows += info.rows + len(info.id) + len(info.parameters) + info.number
        reply = to_server(done_cls(OUT_HEADERS, (), ()))
        # the server (its receive loop, then _exchange's match and _answers)
        if type(reply) is updates_cls:
            return 0
        match reply:
            case done_cls() as done:
                return len(done.outputs) + len(done.failed) + len(done.open) + rows + batch.number
        return 0

    return trip


def _same(value: Any) -> Any:
    return value


def carriers(module: Any | None, dumps: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """How a message goes from one end to the other: not at all, encoded and decoded in
    process (``dumps``: the pickler its wire uses), through a socket pair. ``module``: a
    messages module (None: the tagged tuples, which ``Connection.send`` pickled as they
    were)."""
    ours, theirs = socket.socketpair()
    a, b = Connection(ours.detach()), Connection(theirs.detach())
    if module is None:

        def encoded(value: Any) -> Any:
            return pickle.loads(dumps(value))

        def through(value: Any) -> Any:
            a.send(value)
            return b.recv()

    else:
        sender, receiver = module.Wire(a), module.Wire(b)
        pack, unpack = module.pack, module.unpack

        def encoded(value: Any) -> Any:
            return unpack(pickle.loads(dumps(pack(value))))

        def through(value: Any) -> Any:
            sender.send(value)
            return receiver.recv()

    return {"build+read": _same, "encode": encoded, "round trip": through}


def _pickle(value: Any) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def load_at(rev: str) -> ModuleType | None:
    """``messages.py`` at commit ``rev``, as a module of its own; None outside a checkout."""
    path = "src/inferplex/backends/worker/messages.py"
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:{path}"],
            capture_output=True,
            check=True,
            text=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    name = f"_messages_at_{rev}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def measure(trip: Trip, carry: Callable[[Any], Any], calls: int) -> float:
    """µs of this thread's CPU per request."""
    for _ in range(50):
        trip(carry, carry)
    start = time.thread_time_ns()
    for _ in range(calls):
        trip(carry, carry)
    return (time.thread_time_ns() - start) / calls / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--calls", type=int, default=20_000, help="requests per case and round")
    parser.add_argument(
        "--against", default=DEFAULT_AGAINST, help="a commit whose messages.py to compare"
    )
    args = parser.parse_args()
    # (how a request's messages are built and read, their module, the pickler of its wire)
    variants: dict[str, tuple[Trip, Any | None, Callable[[Any], Any]]] = {
        "tuples (60c23ba)": (tuple_trip, None, ForkingPickler.dumps)
    }
    older = load_at(args.against)
    if older is not None:  # its Wire sent with Connection.send
        variants[f"messages {args.against}"] = (typed_trip(older), older, ForkingPickler.dumps)
    variants["messages (this tree)"] = (typed_trip(current), current, _pickle)
    cases = {name: carriers(module, dumps) for name, (_, module, dumps) in variants.items()}
    stages = ("build+read", "encode", "round trip")
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, (trip, _, _) in variants.items():
            for stage in stages:
                took = measure(trip, cases[name][stage], args.calls)
                figures.setdefault((name, stage), []).append(took)
    print(f"µs of CPU per request (median of {args.rounds} rounds [best]), one RequestInfo")
    print(f"{'':24}" + "".join(f"{stage:>20}" for stage in stages))
    for name in variants:
        cells = []
        for stage in stages:
            values = figures[(name, stage)]
            cells.append(f"{statistics.median(values):9.2f} [{min(values):6.2f}]")
        print(f"{name:24}" + "".join(f"{cell:>20}" for cell in cells))


if __name__ == "__main__":
    main()
