"""Hundreds of models in one server, beside the same models loaded in-process.

    python -m bench.many_models [--models 1000] [--concurrency 8] [--duration S] [--rounds N]
                                [--quick]

Builds a repository of ``--models`` copies of add_sub (FP32 [1,16] + [1,16], no dynamic
batching: a light model that asks for nothing of its own), then measures, side by side:

- **in-process**: a fresh Python process loads the same files into ONNX Runtime sessions in a
  loop, with the session options the server gives a light model (one intra-op thread); its
  load time, resident memory and threads are the reference, and the rate of runs spread at
  random over its sessions against runs of one session is what ONNX Runtime itself loses
  to spreading (each session's memory is cold when its turn comes);
- **load**: ``inferplex serve`` from start to ready on the repository, less the same for a
  repository of one copy (the server's own start-up), against the in-process loop;
- **memory and threads**: the ready server's resident memory and threads, against the
  in-process process's;
- **idle CPU**: the ready server's CPU over ``--idle`` seconds, against a one-model server's;
- **spread traffic**: ``--concurrency`` closed-loop HTTP binary clients, each request to a
  model drawn at random among all, against the same clients all on one model, in
  alternating rounds (same server, same model kind: what spreading costs).

Prints each figure beside its reference and the issue's targets with PASS/MISS (issue 21,
"Hundreds of models").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import uvloop

from bench.loadgen import Call, Measurement, measure, open_http
from bench.overhead import Timing, add_round_options, round_options
from bench.report import Target, check_targets, number
from examples import modelgen
from inferplex.config.writers import to_pbtxt
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

#: the in-process reference, run in a fresh interpreter so its figures are its own
INPROCESS = """
import json, random, sys, time
import numpy as np
import onnxruntime as ort
import psutil
from inferplex.backends.onnxruntime import session_options
files = sys.argv[1:]
start = time.perf_counter()
sessions = [ort.InferenceSession(f, session_options(1), providers=["CPUExecutionProvider"])
            for f in files]
seconds = time.perf_counter() - start
process = psutil.Process()
loaded = {"seconds": seconds, "rss": process.memory_info().rss, "threads": process.num_threads()}
a = np.ones((1, 16), dtype=np.float32)
feeds = {"INPUT0": a, "INPUT1": a}
for session in sessions:
    session.run(None, feeds)
pick = random.Random(0)
rates = {}
for case, choose in (("one", lambda: 0), ("spread", lambda: pick.randrange(len(sessions)))):
    start = time.perf_counter()
    for _ in range(20000):
        sessions[choose()].run(None, feeds)
    rates[case] = 20000 / (time.perf_counter() - start)
print(json.dumps({**loaded, "run_ratio": rates["spread"] / rates["one"]}))
"""

TARGETS = (
    Target("ready: load time / in-process loop", "load_ratio", 1.5, ""),
    Target("resident memory over in-process", "rss_over_mb", 50.0, "MB"),
    Target("threads per core", "threads_per_core", 4.0, ""),
    Target("idle CPU over a one-model server", "idle_cpu_over_pct", 0.2, "% of a core"),
    Target("spread traffic / one model", "spread_ratio", 0.9, "", True),
)


def build_repository(repo: Path, models: int) -> list[Path]:
    """``models`` copies of add_sub, named m0000...; returns their model files."""
    base = modelgen.add_sub(repo.parent / "base")
    config = modelgen.model_config(base, max_batch_size=8, instance_kind="KIND_CPU")
    files = []
    for index in range(models):
        name = f"m{index:04d}"
        target = repo / name / "1" / "model.onnx"
        target.parent.mkdir(parents=True)
        shutil.copyfile(base, target)
        (repo / name / "config.pbtxt").write_text(to_pbtxt({**config, "name": name}))
        files.append(target)
    return files


def inprocess(files: list[Path]) -> dict[str, float]:
    """Load time, resident memory and threads of the sessions loaded in a loop."""
    out = subprocess.run(
        [sys.executable, "-c", INPROCESS, *map(str, files)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout))


def serve(repo: Path, log: Path) -> tuple[RunningServer, float]:
    """The server on ``repo`` and its seconds from start to ready."""
    start = time.perf_counter()
    server = start_server(repo, log, env={"INFERPLEX_LOG_LEVEL": "warning"}, deadline=900)
    return server, time.perf_counter() - start


def tree(server: RunningServer) -> list[psutil.Process]:
    process = psutil.Process(server.process.pid)
    return [process, *process.children(recursive=True)]


def cpu_seconds(server: RunningServer) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in tree(server))


def idle_cpu(server: RunningServer, seconds: float) -> float:
    """Percent of a core the ready, unused server takes (after a settling second)."""
    time.sleep(1.0)
    before = cpu_seconds(server)
    time.sleep(seconds)
    return (cpu_seconds(server) - before) / seconds * 100


async def traffic(
    server: RunningServer, models: list[str], concurrency: int, timing: Timing, seed: int
) -> Measurement:
    """Closed loops of HTTP binary add_sub requests, each to a model drawn from ``models``;
    the first and last answers are checked."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    encoded = [
        arrays.http_binary_request(HOST, m, {"INPUT0": a, "INPUT1": b}, list(expected))
        for m in models
    ]
    connections = await open_http(HOST, server.http_port, concurrency)
    process = psutil.Process(server.process.pid)

    def check(head: bytes, body: bytes, what: str) -> None:
        outputs = arrays.decode_http_response(head, body)
        arrays.check_outputs(outputs, expected=expected, what=what)

    def caller(index: int) -> Call:
        chooser = random.Random(seed + index)
        connection = connections[index]
        return lambda: connection.send(encoded[chooser.randrange(len(encoded))])

    try:
        check(*await connections[0].send(encoded[0]), "the first answer")
        result = await measure(
            [caller(i) for i in range(concurrency)],
            timing.duration,
            timing.warmup,
            lambda: process.cpu_times().user + process.cpu_times().system,
        )
        check(*await connections[-1].send(encoded[-1]), "the last answer")
        return result
    finally:
        for connection in connections:
            connection.close()


async def spread_rounds(
    server: RunningServer, names: list[str], concurrency: int, rounds: int, timing: Timing
) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"spread": [], "one": []}
    for round_ in range(rounds):
        for case, models in (("spread", names), ("one", names[:1])):
            result = await traffic(server, models, concurrency, timing, seed=round_)
            rates[case].append(result.rate)
            print(f"  round {round_ + 1} {case:6} {result.rate:8.0f} req/s", flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description="hundreds of models in one server")
    add_round_options(parser, duration=3.0, warmup=1.0, rounds=3)
    parser.add_argument("--models", type=int, default=1000, help="copies of add_sub")
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU")
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(1.0, 0.5))
    idle_s = 3.0 if args.quick else args.idle
    cores = os.cpu_count() or 1
    load_average = os.getloadavg()[0]  # the machine may be shared: how busy it was
    with tempfile.TemporaryDirectory(prefix="inferplex-many-") as tmp:
        repo, single = Path(tmp) / "models", Path(tmp) / "one"
        files = build_repository(repo, args.models)
        build_repository(single, 1)
        reference = inprocess(files)
        print(
            f"in-process: {args.models} sessions in {reference['seconds']:.2f} s, "
            f"RSS {reference['rss'] / 2**20:.0f} MB, {reference['threads']:.0f} threads",
            flush=True,
        )
        small, small_ready = serve(single, Path(tmp) / "one.log")
        try:
            small_idle = idle_cpu(small, idle_s)
        finally:
            small.stop()
        server, ready = serve(repo, Path(tmp) / "server.log")
        try:
            rss = sum(p.memory_info().rss for p in tree(server))
            threads = sum(p.num_threads() for p in tree(server))
            idle = idle_cpu(server, idle_s)
            names = [f"m{i:04d}" for i in range(args.models)]
            print(f"traffic at concurrency {args.concurrency}, HTTP binary", flush=True)
            rates = uvloop.run(spread_rounds(server, names, args.concurrency, rounds, timing))
        finally:
            code = server.stop()
            if code != 0:
                print(f"server exited with {code}:\n{server.log()[-3000:]}", file=sys.stderr)
    load = ready - small_ready
    spread, one = float(np.median(rates["spread"])), float(np.median(rates["one"]))
    flat = {
        "load_ratio": load / reference["seconds"],
        "rss_over_mb": (rss - reference["rss"]) / 2**20,
        "threads_per_core": threads / cores,
        "idle_cpu_over_pct": idle - small_idle,
        "spread_ratio": spread / one,
    }
    print(f"\n{args.models} models, {cores} cores, load average {load_average:.2f} at the start")
    print(f"{'figure':34} {'served':>12} {'reference':>12}")
    rows = (
        ("ready, s (less a one-model server)", load, reference["seconds"]),
        ("ready from start, s", ready, small_ready),
        ("resident memory, MB", rss / 2**20, reference["rss"] / 2**20),
        ("threads", threads, reference["threads"]),
        ("idle CPU, % of a core", idle, small_idle),
        ("req/s spread / one model (medians)", spread, one),
        ("spread / one", spread / one, reference["run_ratio"]),
    )
    for label, served, ref in rows:
        print(f"{label:34} {number(served):>12} {number(ref):>12}")
    check_targets(TARGETS, flat)


if __name__ == "__main__":
    main()
