"""What serving costs: the server side by side with in-process ONNX Runtime, in one run.

    python -m bench.overhead [--duration S] [--rounds N] [--quick] [--threads N]

Builds a repository with examples.modelgen (add_sub, small_cnn), starts the real server
(``python -m inferplex serve``) on free loopback ports, and measures:

- small_cnn, compute-bound: images/s of in-process ONNX Runtime (one session, the server's
  intra-op thread count, 4 threads calling ``session.run``) against the served model over
  HTTP binary and gRPC at concurrency 4; the ratio served / in-process is the overhead.
  Served with preferred batch sizes (the targets) and with plain dynamic batching
  (``build_repository`` says why). Beside them, the cores split: in-process sessions of one
  intra-op thread each against as many served instances of one thread, one image per run.
- add_sub, overhead-bound: requests/s, p50/p99 latency and the server's CPU time per request
  (user + system of the server process, from psutil) at concurrency 1 and 16, over HTTP JSON,
  HTTP binary and gRPC.

Every case runs ``--rounds`` times, interleaved round-robin so that a burst of unrelated load
on the machine hits all cases alike; each case reports its best round (highest rate).
Prints a table and the targets of issue 2 with PASS/MISS; writes JSON to the results folder
(bench/outputs.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil

from bench.loadgen import (
    Call,
    Measurement,
    grpc_call,
    measure,
    measure_threads,
    open_http,
)
from bench.outputs import add_results_option, result_path
from bench.report import ADD_SUB_CASES, report
from examples import modelgen
from inferplex.backends.onnxruntime import SPINNING_PARAMETER, session_options
from inferplex.config.writers import write_config
from inferplex.lifecycle.planning import INTRA_OP_PARAMETER
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.clients import grpc_infer
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

CNN_CONCURRENCY = 4
#: small_cnn's served modes (bench/report.py CNN_MODES): protocol and model
SERVED_CNN = {
    "http-binary": ("http-binary", "small_cnn"),
    "grpc": ("grpc", "small_cnn"),
    "http-binary-split": ("http-binary", "small_cnn_split"),
    "grpc-split": ("grpc", "small_cnn_split"),
    "http-binary-plain": ("http-binary", "small_cnn_plain"),
    "grpc-plain": ("grpc", "small_cnn_plain"),
    "grpc-aio": ("grpc-aio", "small_cnn"),
}

Check = Callable[[dict[str, np.ndarray]], None]
CpuClock = Callable[[], float]
#: One case of the benchmark: runs it once for the given timing.
Case = Callable[["Timing"], Awaitable[Measurement]]
#: Per case: its best round and the rates of all rounds.
Results = dict[str, tuple[Measurement, list[float]]]


@dataclass(frozen=True)
class Timing:
    duration: float
    warmup: float


def add_round_options(
    parser: argparse.ArgumentParser, duration: float, warmup: float, rounds: int
) -> None:
    """The options every round-based benchmark takes: --duration, --warmup, --rounds, --quick."""
    parser.add_argument(
        "--duration", type=float, default=duration, help="seconds per case and round"
    )
    parser.add_argument("--warmup", type=float, default=warmup, help="seconds before measuring")
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds per case")
    parser.add_argument("--quick", action="store_true", help="one short round, a smoke run")


def round_options(args: argparse.Namespace, quick: Timing) -> tuple[int, Timing]:
    """(rounds, timing) from ``add_round_options``' flags; ``--quick`` means one round of
    ``quick``."""
    if args.quick:
        return 1, quick
    return args.rounds, Timing(args.duration, args.warmup)


def build_repository(repo: Path, threads: int) -> Path:
    """add_sub and small_cnn, batched and dynamically batched as a user would serve them;
    returns the small_cnn model file.

    small_cnn is served three times. ``small_cnn`` is tuned as for a compute-bound model that
    has the machine to itself, one instance with ``threads`` intra-op threads, as the
    in-process session: preferred batch sizes 2 and 4 (a batch of 2 runs while the other two
    requests travel) and intra-op threads that spin between runs (ONNX Runtime's own default;
    the server's is off, so that idle models leave the cores to busy ones).
    ``small_cnn_split`` has the cores split between instances, ``threads`` instances of one
    intra-op thread each, one image per run (``preferred_batch_size [1]``: no concatenation,
    and on one thread a batch of 2 runs no faster per image), as the in-process sessions it
    is compared with. ``small_cnn_plain`` as the server's defaults have it: four closed-loop
    clients fall into step with its batches, which alternate between 1 and 3 images (the one
    request that arrives while a batch of 3 runs goes alone next, while the other three travel
    back and forth), and a batch of 1 runs at 0.94 the images/s of larger ones."""
    cnn = modelgen.small_cnn(repo)
    split = modelgen.small_cnn(repo, name="small_cnn_split")
    plain = modelgen.small_cnn(repo, name="small_cnn_plain")
    for path in (modelgen.add_sub(repo), cnn, split, plain):
        config = modelgen.model_config(
            path, max_batch_size=8, instance_kind="KIND_CPU", dynamic_batching=True
        )
        if path == cnn:
            config["dynamic_batching"] = {"preferred_batch_size": [2, 4]}
            config["parameters"] = {SPINNING_PARAMETER: {"string_value": "1"}}
        elif path == split:
            config["dynamic_batching"] = {"preferred_batch_size": [1]}
            config["instance_group"] = [{"count": threads, "kind": "KIND_CPU"}]
            config["parameters"] = {INTRA_OP_PARAMETER: {"string_value": "1"}}
        write_config(path.parent.parent, config)
    return cnn


def inprocess_session(model: Path, threads: int) -> ort.InferenceSession:
    """The model in ONNX Runtime with the session options the server's backend uses by
    default (idle intra-op threads do not spin: with four callers on two cores that is also
    ONNX Runtime's faster setting, about 265 against 245 small_cnn images/s)."""
    return ort.InferenceSession(
        str(model), session_options(threads), providers=["CPUExecutionProvider"]
    )


async def inprocess_load(
    run: Callable[[], object], concurrency: int, timing: Timing
) -> Measurement:
    return await asyncio.to_thread(
        measure_threads, run, concurrency, timing.duration, timing.warmup
    )


def split_runs(model: Path, sessions: int, feeds: arrays.Arrays) -> Callable[[], object]:
    """A ``session.run`` for ``measure_threads``' callers: ``sessions`` sessions of one
    intra-op thread, each caller thread bound to one of them in turn."""
    pool = [inprocess_session(model, 1) for _ in range(sessions)]
    turn = itertools.count()
    bound = threading.local()

    def run() -> object:
        session = getattr(bound, "session", None)
        if session is None:
            session = bound.session = pool[next(turn) % sessions]
        return session.run(None, feeds)

    return run


async def http_load(
    port: int, request: bytes, concurrency: int, check: Check, cpu: CpuClock, timing: Timing
) -> Measurement:
    connections = await open_http(HOST, port, concurrency)
    try:
        check(arrays.decode_http_response(*await connections[0].send(request)))
        calls = [partial(c.send, request) for c in connections]
        result = await measure(calls, timing.duration, timing.warmup, cpu)
        check(arrays.decode_http_response(*await connections[-1].send(request)))
        return result
    finally:
        for connection in connections:
            connection.close()


async def grpc_load(
    target: str, request: bytes, concurrency: int, check: Check, cpu: CpuClock, timing: Timing
) -> Measurement:
    """Closed loops of ModelInfer ``request`` to ``target`` (host:port) over the lean client,
    one connection per loop as over HTTP (on one shared connection the client paid about
    30 µs more per 600 KB request)."""
    host, _, port = target.rpartition(":")
    lanes = [await grpc_call(host, int(port), request) for _ in range(concurrency)]
    try:
        return await checked_load([call for _, call in lanes], check, cpu, timing)
    finally:
        for connection, _ in lanes:
            connection.close()


async def grpc_aio_load(
    target: str, request: bytes, concurrency: int, check: Check, cpu: CpuClock, timing: Timing
) -> Measurement:
    """As ``grpc_load`` with grpc.aio as the client (one channel, as its users share one)."""
    channel, infer = grpc_infer(target)
    try:
        return await checked_load([partial(infer, request)] * concurrency, check, cpu, timing)
    finally:
        await channel.close()


async def checked_load(
    calls: list[Call], check: Check, cpu: CpuClock, timing: Timing
) -> Measurement:
    """A closed loop per gRPC call in ``calls``, the first and last answers checked."""
    check(arrays.decode_grpc_response(await calls[0]()))
    result = await measure(calls, timing.duration, timing.warmup, cpu)
    check(arrays.decode_grpc_response(await calls[-1]()))
    return result


def served_case(
    server: RunningServer,
    protocol: str,
    model: str,
    inputs: arrays.Arrays,
    expected: arrays.Arrays,
    concurrency: int,
    atol: float = 0.0,
) -> Case:
    """A load case against the server; every run checks a first and a last answer."""
    process = psutil.Process(server.process.pid)

    def cpu() -> float:
        times = process.cpu_times()
        return times.user + times.system

    check = partial(
        arrays.check_outputs, expected=expected, what=f"{model} over {protocol}", atol=atol
    )
    if protocol == "grpc":
        request = arrays.grpc_request(model, inputs, list(expected))
        return partial(grpc_load, server.grpc_url, request, concurrency, check, cpu)
    if protocol == "grpc-aio":
        request = arrays.grpc_request(model, inputs, list(expected))
        return partial(grpc_aio_load, server.grpc_url, request, concurrency, check, cpu)
    encoder = arrays.http_json_request if protocol == "http-json" else arrays.http_binary_request
    request = encoder(HOST, model, inputs, list(expected))
    return partial(http_load, server.http_port, request, concurrency, check, cpu)


def add_sub_cases(server: RunningServer, prefix: str = "") -> dict[str, Case]:
    """The hot path's cases: add_sub per protocol and concurrency, keyed
    ``<prefix><protocol>/c<concurrency>``."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    inputs, expected = {"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}
    return {
        f"{prefix}{protocol}/c{concurrency}": served_case(
            server, protocol, "add_sub", inputs, expected, concurrency
        )
        for protocol, concurrency in ADD_SUB_CASES
    }


def cases(server: RunningServer, model: Path, threads: int) -> dict[str, Case]:
    """Every case by key: ``cnn/<mode>`` and ``<protocol>/c<concurrency>``."""
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    feeds = {"image": image}
    session = inprocess_session(model, threads)
    logits = {"logits": session.run(None, feeds)[0]}
    all_cases: dict[str, Case] = {
        "cnn/in-process": partial(
            inprocess_load, partial(session.run, None, feeds), CNN_CONCURRENCY
        ),
        # one caller per session: the fastest way to drive them (four would oversubscribe)
        "cnn/in-process-split": partial(inprocess_load, split_runs(model, threads, feeds), threads),
    }
    for mode, (protocol, served_model) in SERVED_CNN.items():
        # Dynamic batching may group requests: allow for summation-order differences.
        all_cases[f"cnn/{mode}"] = served_case(
            server, protocol, served_model, feeds, logits, CNN_CONCURRENCY, atol=1e-3
        )
    return {**all_cases, **add_sub_cases(server)}


def paired_cases(server: RunningServer, against: RunningServer) -> dict[str, Case]:
    """The hot path's cases on both servers, each case of one beside its twin of the other
    (``against/<key>``), so that a burst of unrelated load hits both alike."""
    ours, theirs = add_sub_cases(server), add_sub_cases(against, AGAINST)
    pairs = zip(ours.items(), theirs.items(), strict=True)
    return {key: case for pair in pairs for key, case in pair}


#: what --against compares (lower is better for all but the rate) and the prefix of the
#: other server's cases
COMPARED = ("rate", "p50_ms", "p99_ms", "server_cpu_us_per_request")
AGAINST = "against/"
#: how far a figure may move the wrong way before the comparison calls it a regression
TOLERANCE = 0.03


def comparison(flat: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per add_sub case and figure, this server's over the other's (``--against``), and
    print them: each ratio marked MISS where it is more than TOLERANCE the wrong way."""
    ratios: dict[str, dict[str, float]] = {}
    print(f"\nthis server / --against, add_sub (MISS: over {TOLERANCE:.0%} the wrong way)")
    print(f"{'case':16}" + "".join(f"{name:>29}" for name in COMPARED))
    for protocol, concurrency in ADD_SUB_CASES:
        key = f"{protocol}/c{concurrency}"
        row = ratios[key] = {}
        cells = []
        for name in COMPARED:
            ours, theirs = flat[f"{key}/{name}"], flat[f"{AGAINST}{key}/{name}"]
            ratio = row[name] = round(ours / theirs, 3)
            worse = ratio < 1 - TOLERANCE if name == "rate" else ratio > 1 + TOLERANCE
            cells.append(f"{ours:>9} / {theirs:<9} {ratio:5.3f}{' MISS' if worse else '     '}")
        print(f"{key:16}" + "".join(f"{cell:>29}" for cell in cells))
    return ratios


async def run_rounds(all_cases: dict[str, Case], rounds: int, timing: Timing) -> Results:
    """Run every case ``rounds`` times, round-robin; each case's best round and all rates."""
    runs: dict[str, list[Measurement]] = {key: [] for key in all_cases}
    for number in range(1, rounds + 1):
        print(f"round {number}/{rounds}:", end="", flush=True)
        for key, case in all_cases.items():
            runs[key].append(await case(timing))
            print(f" {key}", end="", flush=True)
        print(flush=True)
    return {
        key: (max(measured, key=lambda m: m.rate), [round(m.rate, 1) for m in measured])
        for key, measured in runs.items()
    }


def figures(results: Results) -> dict[str, Any]:
    """Flat figures by key (``grpc/c1/p50_ms``, ``cnn/grpc/ratio``, ...) for targets and JSON."""
    flat: dict[str, Any] = {}
    for key, (best, rates) in results.items():
        flat.update({f"{key}/{name}": value for name, value in best.summary().items()})
        flat[f"{key}/rates"] = rates
        if key.startswith("cnn/"):
            # served split instances against in-process split sessions, the rest against one
            # session
            baseline = "cnn/in-process-split" if key.endswith("-split") else "cnn/in-process"
            flat[f"{key}/ratio"] = round(best.rate / results[baseline][0].rate, 3)
    return flat


def main() -> None:
    parser = argparse.ArgumentParser(description="served vs in-process overhead")
    add_round_options(parser, duration=1.5, warmup=0.5, rounds=5)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1,
        help="intra-op threads of the server's sessions and of the in-process session",
    )  # fmt: skip
    parser.add_argument(
        "--against",
        type=Path,
        help="the src/ folder of another inferplex (e.g. a git worktree of an older commit): "
        "only the add_sub cases run, on both servers side by side, and the ratios are printed",
    )
    add_results_option(parser)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(0.5, 0.2))

    load_before = os.getloadavg()[0]
    if load_before > 0.5:
        print(
            f"note: load average {load_before:.2f} before the run; other processes compete for "
            "the CPUs, so look at the spread of the rounds",
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        repo = Path(tmp) / "models"
        model = build_repository(repo, args.threads)
        print(f"starting the server ({args.threads} intra-op threads)", flush=True)
        env = {"INFERPLEX_INTRA_OP_THREADS": str(args.threads), "INFERPLEX_LOG_LEVEL": "warning"}
        servers = [start_server(repo, Path(tmp) / "server.log", env=env)]
        try:
            if args.against is not None:
                print(f"starting the server of {args.against}", flush=True)
                other = {**env, "PYTHONPATH": str(args.against.resolve())}
                servers.append(start_server(repo, Path(tmp) / "against.log", env=other))
                chosen = paired_cases(*servers)
            else:
                chosen = cases(servers[0], model, args.threads)
            import uvloop

            results = uvloop.run(run_rounds(chosen, rounds, timing))
        finally:
            for server in servers:
                code = server.stop()
                if code != 0:
                    print(f"server exited with {code}:\n{server.log()[-3000:]}", file=sys.stderr)

    flat = figures(results)
    if args.against is not None:
        outcomes: Any = comparison(flat)
    else:
        outcomes = report(flat, args.threads)
    out = result_path("overhead", args.results_dir)
    document = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "onnxruntime": ort.__version__,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0],
        },
        "options": {
            **vars(args),
            "against": args.against and str(args.against),
            "duration": timing.duration,
            "rounds": rounds,
        },
        "figures": flat,
        "targets": outcomes,
    }
    out.write_text(json.dumps(document, indent=2, default=str) + "\n")  # paths in the options
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
