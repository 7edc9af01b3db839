"""Models isolated in worker processes (parameter ``isolation: process``) against the same
models in the server's process, side by side in one run.

    python -m bench.isolation [--quick] [--cycles N] [--rounds N] [--duration S]
                              [--warmup S] [--parts memory,overhead]

1. **Memory.** A 42 MB ONNX MLP (1024 features, three hidden layers of 2048), served twice
   from one repository by two servers in ``--model-control-mode explicit``: by one in the
   server's process, by the other isolated. ``--cycles`` times, alternating between the two
   servers: the resident set (RSS) of the server and all its child processes before the
   load, after the load and one request, and after the unload. What unloading leaves behind
   is the figure: in-process, ONNX Runtime keeps arenas and pools even after glibc's
   ``malloc_trim``; isolated, the worker process ends and takes them with it.
2. **Per-request overhead.** One server with add_sub and small_cnn (``max_batch_size`` 8,
   dynamic batching, as ``bench/overhead.py`` serves them) each in-process and isolated;
   closed-loop HTTP binary clients: add_sub at concurrency 1 and 8, small_cnn at 4. Rounds
   interleaved round-robin, each case's best round; requests/s, p50, and CPU per request of
   the server and its worker processes together. Ratios isolated / in-process.

Prints every figure and writes JSON to the results folder (bench/outputs.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import urllib.request
from contextlib import AbstractContextManager as ContextManager
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.lifecycle import server
from bench.loadgen import Measurement
from bench.outputs import add_results_option
from bench.overhead import (
    Case,
    Timing,
    add_round_options,
    http_load,
    inprocess_session,
    round_options,
    run_rounds,
)
from bench.serving import machine_state, write_results
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST, RunningServer

MIB = 1 << 20
ISOLATED = {"key": "isolation", "value": {"string_value": "process"}}
#: the overhead cases: (model, clients)
OVERHEAD_CASES = (("add_sub", 1), ("add_sub", 8), ("small_cnn", 4))


def tree_rss(pid: int) -> int:
    """RSS of a process and all its descendants, in bytes."""
    process = psutil.Process(pid)
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return int(total)


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of a process and its living descendants."""
    process = psutil.Process(pid)
    total = 0.0
    for each in (process, *process.children(recursive=True)):
        try:
            times = each.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def cpu_per_request(measurement: Measurement) -> float:
    """CPU µs per request of the server and its workers (the clock always reads it)."""
    assert measurement.server_cpu_seconds is not None
    return measurement.server_cpu_seconds / max(1, measurement.requests) * 1e6


def add_copy(repo: Path, source: str, name: str, config: dict[str, Any], isolated: bool) -> None:
    """``name``: the model file of ``source`` under another name, isolated or not."""
    folder = repo / name / "1"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo / source / "1" / "model.onnx", folder / "model.onnx")
    fields = {**config, "name": name, "parameters": [ISOLATED] if isolated else []}
    write_config(repo / name, fields)


def explicit_server(repo: Path, log: Path) -> ContextManager[RunningServer]:
    """The real server with nothing loaded at start (each part loads what it measures)."""
    return server(repo, log, model_control_mode="explicit")


def post(running: RunningServer, path: str, body: bytes = b"{}") -> dict[str, Any]:
    request = urllib.request.Request(f"http://{running.http_url}{path}", data=body)
    with urllib.request.urlopen(request, timeout=300) as response:
        data = response.read()
    return json.loads(data) if data else {}


def footprint(running: RunningServer, model: str) -> int:
    with urllib.request.urlopen(f"http://{running.http_url}/v2/repository/memory") as response:
        report = json.loads(response.read())
    return next(m["bytes"] for m in report["models"] if m["name"] == model)


# -- 1: memory ----------------------------------------------------------------------------------
def memory(work: Path, cycles: int) -> dict[str, Any]:
    repo = work / "memory"
    path = modelgen.mlp(repo, "big", features=1024, hidden=(2048, 2048, 2048))
    config = modelgen.model_config(path, max_batch_size=8)
    write_config(repo / "big", config)
    add_copy(repo, "big", "big_isolated", config, isolated=True)
    features = np.random.default_rng(0).random((8, 1024), dtype=np.float32)
    tensor = {"name": "features", "shape": [8, 1024], "datatype": "FP32"}
    json_body = json.dumps({"inputs": [{**tensor, "data": features.ravel().tolist()}]}).encode()
    size = path.stat().st_size
    print(f"\n1. memory: a {size / 1e6:.0f} MB MLP, {cycles} load / request / unload cycles")
    modes = {"in-process": "big", "isolated": "big_isolated"}
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    with ExitStack() as stack:
        servers = {
            mode: stack.enter_context(explicit_server(repo, work / f"memory-{mode}.log"))
            for mode in modes
        }
        start = {mode: tree_rss(s.process.pid) for mode, s in servers.items()}
        for _ in range(cycles):
            for mode, model in modes.items():  # the two servers take turns
                running = servers[mode]
                pid = running.process.pid
                before = tree_rss(pid)
                post(running, f"/v2/repository/models/{model}/load")
                post(running, f"/v2/models/{model}/infer", json_body)
                loaded = tree_rss(pid)
                counted = footprint(running, model)
                post(running, f"/v2/repository/models/{model}/unload")
                after = tree_rss(pid)
                rows[mode].append(
                    {
                        "before_mib": round(before / MIB, 1),
                        "loaded_mib": round(loaded / MIB, 1),
                        "unloaded_mib": round(after / MIB, 1),
                        "footprint_mib": round(counted / MIB, 1),
                        "kept_mib": round((after - start[mode]) / MIB, 1),
                    }
                )
    for mode, cycles_rows in rows.items():
        print(f"\n  {mode}: RSS of the server and its child processes, MiB")
        print("  cycle   before  after load  after unload  load adds  unload returns  kept")
        for i, row in enumerate(cycles_rows, 1):
            print(
                f"  {i:5} {row['before_mib']:8.1f} {row['loaded_mib']:11.1f} "
                f"{row['unloaded_mib']:13.1f} {row['loaded_mib'] - row['before_mib']:10.1f} "
                f"{row['loaded_mib'] - row['unloaded_mib']:15.1f} {row['kept_mib']:5.1f}"
            )
        counts = [r["footprint_mib"] for r in cycles_rows]
        print(f"  footprint the server counted: {min(counts):.1f}-{max(counts):.1f} MiB")
    print(
        "  (kept: RSS after the unload above the server's RSS before its first load; the "
        "two servers alternate)"
    )
    return {"model_bytes": size, "cycles": rows}


# -- 2: per-request overhead --------------------------------------------------------------------
def overhead_cases(running: RunningServer, cnn: Path) -> dict[str, Case]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    (logits,) = inprocess_session(cnn, 1).run(None, {"image": image})
    data = {
        "add_sub": ({"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}, 0.0),
        # dynamic batching may group requests: allow for summation-order differences
        "small_cnn": ({"image": image}, {"logits": logits}, 1e-3),
    }
    cpu = partial(tree_cpu, running.process.pid)
    cases: dict[str, Case] = {}
    for model, clients in OVERHEAD_CASES:
        inputs, expected, atol = data[model]
        for mode, name in (("in-process", model), ("isolated", f"{model}_isolated")):
            check = partial(arrays.check_outputs, expected=expected, what=f"{name}", atol=atol)
            request = arrays.http_binary_request(HOST, name, inputs, list(expected))
            cases[f"{model}/c{clients}/{mode}"] = partial(
                http_load, running.http_port, request, clients, check, cpu
            )
    return cases


def overhead(work: Path, rounds: int, timing: Timing) -> dict[str, Any]:
    import uvloop

    repo = work / "overhead"
    cnn = modelgen.small_cnn(repo)
    for path in (modelgen.add_sub(repo), cnn):
        model = path.parent.parent.name
        config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
        write_config(repo / model, config)
        add_copy(repo, model, f"{model}_isolated", config, isolated=True)
    print(f"\n2. per-request overhead, HTTP binary, {rounds} interleaved round(s)")
    with explicit_server(repo, work / "overhead.log") as running:
        for model in ("add_sub", "add_sub_isolated", "small_cnn", "small_cnn_isolated"):
            post(running, f"/v2/repository/models/{model}/load")
        results = uvloop.run(run_rounds(overhead_cases(running, cnn), rounds, timing))
    figures: dict[str, Any] = {}
    print("\n  case              mode          req/s    p50 ms   CPU µs/req (server + workers)")
    for model, clients in OVERHEAD_CASES:
        measured = {}
        for mode in ("in-process", "isolated"):
            key = f"{model}/c{clients}/{mode}"
            best, rates = results[key]
            measured[mode] = (best.rate, best.percentile_ms(50), cpu_per_request(best))
            figures[key] = {**best.summary(), "rates": rates}
            rate, p50, cpu = measured[mode]
            print(f"  {model + f' c{clients}':16}  {mode:11} {rate:8.1f} {p50:9.3f}   {cpu:8.1f}")
        iso, base = measured["isolated"], measured["in-process"]
        ratio = {
            name: round(i / b, 3)
            for name, i, b in zip(("rate", "p50", "cpu"), iso, base, strict=True)
        }
        figures[f"{model}/c{clients}/ratio"] = ratio
        print(
            f"  {'':16}  isolated / in-process: req/s {ratio['rate']:.2f}, p50 "
            f"{ratio['p50']:.2f}, CPU per request {ratio['cpu']:.2f}"
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="isolated in a worker process vs in-process")
    add_round_options(parser, duration=2.0, warmup=0.5, rounds=3)
    parser.add_argument("--cycles", type=int, default=5, help="load/unload cycles per mode")
    parser.add_argument("--parts", default="memory,overhead", help="comma-separated parts")
    add_results_option(parser)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(0.5, 0.2))
    cycles = 2 if args.quick else args.cycles
    parts = set(args.parts.split(","))
    before = machine_state()
    document: dict[str, Any] = {"options": vars(args)}
    with tempfile.TemporaryDirectory(prefix="inferplex-isolation-") as tmp:
        if "memory" in parts:
            document["memory"] = memory(Path(tmp), cycles)
        if "overhead" in parts:
            document["overhead"] = overhead(Path(tmp), rounds, timing)
    write_results("isolation", document, before, folder=args.results_dir)


if __name__ == "__main__":
    main()
