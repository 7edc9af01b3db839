"""Dynamic batching on vs off: one MLP served twice in one server, measured in one run.

    python -m bench.batching [--duration S] [--rounds N] [--quick] [--threads N]

Builds ``examples.modelgen.mlp`` (FP32 ``[-1, 64]`` -> ``[-1, 10]``, 72 hidden layers of 64: at
batch 1 each small layer costs about a microsecond of kernel dispatch, which a batch of 32
shares, so in-process a row costs ~0.1 ms alone and ~10x less in a batch of 32; both figures
are measured and printed first). The server gets the same model as

- ``mlp_batched``: ``max_batch_size: 32``, ``dynamic_batching { }``, and a variant per
  candidate ``max_queue_delay_microseconds`` (``mlp_batched_<N>us``); a short probe over HTTP
  binary picks the fastest, and the rest of the run uses it;
- ``mlp_unbatched``: ``max_batch_size: 0``, no dynamic batching (each request runs alone);

each with one instance of ``--threads`` intra-op threads. 32 clients then send batch-1
requests in closed loops over HTTP binary and gRPC, interleaved over ``--rounds`` rounds (each
case keeps its best round, as ``bench/overhead.py`` does): items/s, p50/p99, the server's CPU
time per request (user + system of its process / requests), and from the server's statistics
over the same window the mean batch size (inference_count / execution_count) and why batches
closed. Prints the targets of issue 3 with PASS/MISS and writes JSON to the results folder
(bench/outputs.py).
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import Measurement, measure_threads
from bench.outputs import add_results_option
from bench.overhead import (
    Case,
    Results,
    Timing,
    add_round_options,
    grpc_load,
    http_load,
    inprocess_session,
    round_options,
    run_rounds,
)
from bench.report import Target, check_targets, number
from bench.serving import (
    Layout,
    Served,
    StatsProbe,
    machine_state,
    output_check,
    reference,
    serve,
    write_model,
    write_results,
)
from examples import modelgen
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST

PROTOCOLS = ("http-binary", "grpc")
MODES = ("batched", "unbatched")
UNBATCHED = "mlp_unbatched"
MAX_BATCH = 32
FEATURES = 64
#: figures of one row of the printed table
ROW = (
    "rate",
    "p50_ms",
    "p99_ms",
    "server_cpu_us_per_request",
    "client_cpu_us_per_request",
    "mean_batch",
    "close_reasons",
    "rates",
)
#: Issue 3's reference: the C++ Triton server with its Python backend on this 2-core machine.
TRITON = {"http-binary": (9000, 168), "grpc": (7700, 182)}

TARGETS = (
    Target("items/s batched / unbatched, HTTP binary", "ratio/http-binary", 3.0, "x", True),
    Target("items/s batched / unbatched, gRPC", "ratio/grpc", 3.0, "x", True),
    Target(
        "server CPU per request, batched, HTTP binary",
        "http-binary/batched/server_cpu_us_per_request",
        90.0,
        "µs",
    ),
    Target(
        "server CPU per request, batched, gRPC",
        "grpc/batched/server_cpu_us_per_request",
        180.0,
        "µs",
    ),
    Target(
        "items/s batched, HTTP binary (Triton: 9,000)", "http-binary/batched/rate", 9000, "/s", True
    ),
    Target("items/s batched, gRPC (Triton: 7,700)", "grpc/batched/rate", 7700, "/s", True),
)


def batched_name(delay_us: int) -> str:
    return "mlp_batched" if delay_us == 0 else f"mlp_batched_{delay_us}us"


def build_repository(repo: Path, layers: int, threads: int, delays: list[int]) -> Path:
    """The MLP batched once per candidate queue delay, and unbatched; returns one model file
    (they are all the same model)."""
    hidden = (FEATURES,) * layers
    for delay in delays:
        path = modelgen.mlp(repo, name=batched_name(delay), features=FEATURES, hidden=hidden)
        batching = {"max_queue_delay_microseconds": delay} if delay else {}
        write_model(path, Layout(MAX_BATCH, batching, threads=threads))
    path = modelgen.mlp(repo, name=UNBATCHED, features=FEATURES, hidden=hidden)
    write_model(path, Layout(0, None, threads=threads))
    return path


def inprocess(model: Path, threads: int, timing: Timing, rounds: int) -> dict[str, float]:
    """Milliseconds per row at batch 1 and 32, one session called in a loop (best round)."""
    session = inprocess_session(model, threads)
    figures: dict[str, float] = {}
    for rows in (1, MAX_BATCH):
        feed = {"features": np.random.default_rng(rows).random((rows, FEATURES), np.float32)}
        run = partial(session.run, None, feed)
        best = max(
            measure_threads(run, 1, timing.duration, timing.warmup).rate for _ in range(rounds)
        )
        figures[f"b{rows}_ms_per_item"] = round(1e3 / (best * rows), 4)
    figures["per_item_ratio"] = round(figures["b1_ms_per_item"] / figures["b32_ms_per_item"], 2)
    return figures


def served_case(served: Served, protocol: str, model: str, concurrency: int) -> Case:
    """Batch-1 requests to ``model`` in closed loops; the measurement's notes hold the
    server's statistics over the measured window."""
    features = {"features": np.random.default_rng(0).random((1, FEATURES), np.float32)}
    expected = reference(served.server.repository / model / "1" / modelgen.MODEL_FILENAME, features)
    check = output_check(expected, f"{model} over {protocol}", atol=1e-4)

    async def case(timing: Timing) -> Measurement:
        probe = StatsProbe(served, [model])
        if protocol == "grpc":
            request = arrays.grpc_request(model, features, list(expected))
            result = await grpc_load(
                served.server.grpc_url, request, concurrency, check, probe, timing
            )
        else:
            request = arrays.http_binary_request(HOST, model, features, list(expected))
            result = await http_load(
                served.server.http_port, request, concurrency, check, probe, timing
            )
        result.notes.update(probe.window()[model])
        return result

    return case


async def pick_delay(
    served: Served, delays: list[int], concurrency: int, timing: Timing, rounds: int
) -> tuple[int, dict[str, Any]]:
    """Each candidate queue delay over HTTP binary, interleaved rounds; the one with the most
    items/s in its best round."""
    cases = {
        str(delay): served_case(served, "http-binary", batched_name(delay), concurrency)
        for delay in delays
    }
    results = await run_rounds(cases, rounds, timing)
    probes = {key: {**best.summary(), **best.notes} for key, (best, _) in results.items()}
    best = max(delays, key=lambda d: probes[str(d)]["rate"])
    return best, probes


async def run(
    served: Served, args: argparse.Namespace, timing: Timing, probe_timing: Timing, rounds: int
) -> dict[str, Any]:
    print(f"probing queue delays {args.delays} µs over HTTP binary", flush=True)
    delay, probes = await pick_delay(served, args.delays, args.concurrency, probe_timing, rounds)
    names = {"batched": batched_name(delay), "unbatched": UNBATCHED}
    cases = {
        f"{protocol}/{mode}": served_case(served, protocol, names[mode], args.concurrency)
        for protocol in PROTOCOLS
        for mode in MODES
    }
    results = await run_rounds(cases, rounds, timing)
    return {"delay_us": delay, "probes": probes, "models": names, "results": results}


def figures(results: Results) -> dict[str, Any]:
    """Flat figures by key (``grpc/batched/rate``, ``ratio/grpc``, ...)."""
    flat: dict[str, Any] = {}
    for key, (best, rates) in results.items():
        flat.update({f"{key}/{name}": value for name, value in best.summary().items()})
        flat.update({f"{key}/{name}": value for name, value in best.notes.items()})
        flat[f"{key}/rates"] = rates
    for protocol in PROTOCOLS:
        batched, unbatched = (results[f"{protocol}/{mode}"][0].rate for mode in MODES)
        flat[f"ratio/{protocol}"] = round(batched / unbatched, 2)
    return flat


def print_report(
    inproc: dict[str, float],
    run_result: dict[str, Any],
    flat: dict[str, Any],
    args: argparse.Namespace,
) -> None:
    print(
        f"\nmlp: FP32 [1,{FEATURES}] per request -> [1,10], {args.layers} hidden layers of "
        f"{FEATURES}, one instance, {args.threads} intra-op thread(s)"
    )
    print(
        f"in-process, one session: batch 1 {inproc['b1_ms_per_item']:.4f} ms/item, batch "
        f"{MAX_BATCH} {inproc['b32_ms_per_item']:.4f} ms/item ({inproc['per_item_ratio']:.1f}x "
        "cheaper per item)"
    )
    print(f"\nqueue delay probe, HTTP binary, concurrency {args.concurrency}")
    print(f"  {'max_queue_delay':>16} {'items/s':>8} {'p99 ms':>7} {'mean batch':>10}")
    for delay, probe in run_result["probes"].items():
        print(
            f"  {delay + ' µs':>16} {probe['rate']:>8.0f} {probe['p99_ms']:>7.2f} "
            f"{number(probe['mean_batch']):>10}"
        )
    delay = run_result["delay_us"]
    chosen = "dynamic_batching { }" if delay == 0 else f"max_queue_delay_microseconds: {delay}"
    print(f"  chosen: {chosen} ({run_result['models']['batched']})")
    print(f"\nbatch-1 requests, concurrency {args.concurrency}; CPU = process user+sys / requests")
    print(
        f"{'protocol':12} {'model':10} {'items/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'server µs/req':>13} {'client µs/req':>13} {'batch':>6}  close reasons  "
        "rounds (items/s)"
    )
    for protocol in PROTOCOLS:
        for mode in MODES:
            f = {name: flat[f"{protocol}/{mode}/{name}"] for name in ROW}
            print(
                f"{protocol:12} {mode:10} {f['rate']:>8.0f} {f['p50_ms']:>7.2f} "
                f"{f['p99_ms']:>7.2f} {number(f['server_cpu_us_per_request']):>13} "
                f"{number(f['client_cpu_us_per_request']):>13} {number(f['mean_batch']):>6}  "
                f"{f['close_reasons']}  {f['rates']}"
            )
    for protocol in PROTOCOLS:
        print(f"batched / unbatched, {protocol}: {flat[f'ratio/{protocol}']:.2f}x")
    print("reference, C++ Triton + Python backend on the 2-core machine of issue 3:")
    for protocol, (rate, cpu) in TRITON.items():
        print(f"  {protocol:12} {rate:>6} req/s  {cpu} µs server CPU per request")


def main() -> None:
    parser = argparse.ArgumentParser(description="dynamic batching on vs off")
    add_round_options(parser, duration=3.0, warmup=0.5, rounds=3)
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop clients")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per instance")
    parser.add_argument("--layers", type=int, default=72, help="hidden layers of the MLP")
    parser.add_argument(
        "--delays", type=lambda s: [int(d) for d in s.split(",")], default=[0, 100, 500],
        help="candidate max_queue_delay_microseconds, comma-separated (0: dynamic_batching {})",
    )  # fmt: skip
    add_results_option(parser)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(0.5, 0.2))
    probe_timing = Timing(0.5, 0.2) if args.quick else Timing(1.0, 0.3)
    before = machine_state()

    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        repo = Path(tmp) / "models"
        model = build_repository(repo, args.layers, args.threads, args.delays)
        print("in-process batch 1 and 32", flush=True)
        inproc = inprocess(model, args.threads, Timing(timing.duration / 2, 0.2), rounds)
        models = [batched_name(d) for d in args.delays] + [UNBATCHED]
        with serve(repo, Path(tmp) / "server.log", {}, models) as served:
            import uvloop

            run_result = uvloop.run(run(served, args, timing, probe_timing, rounds))

    flat = figures(run_result["results"])
    print_report(inproc, run_result, flat, args)
    outcomes = check_targets(TARGETS, flat)
    write_results(
        "batching",
        {
            "options": {**vars(args), "duration": timing.duration, "rounds": rounds},
            "in_process": inproc,
            "queue_delay_probe": run_result["probes"],
            "chosen_delay_us": run_result["delay_us"],
            "figures": flat,
            "targets": outcomes,
        },
        before,
        folder=args.results_dir,
    )


if __name__ == "__main__":
    main()
