"""A latency target held under ``adaptive`` scheduling while another model saturates the
machine, beside the same load under ``round_robin``, in one run.

    python -m bench.slo [--duration S] [--rate R] [--slo-factor F] [--quick]

Two models of the same cost, ``a`` and ``b`` (``modelgen.small_cnn`` at 96x96, different
seeded weights), each 2 instances x 1 intra-op thread, ``max_batch_size: 8`` with dynamic
batching, scheduling weight 1. ``a`` gets requests open loop at ``--rate`` per second; ``b``
gets ``--concurrency`` closed-loop clients, enough to saturate the machine.

1. ``--scheduling-policy round_robin``: ``a`` alone gives its p99; the target is
   ``--slo-factor`` times it (``scheduling { slo_p99_ms: X }``). Then ``a`` while ``b`` floods.
2. ``--scheduling-policy adaptive`` with ``a``'s target in its config: ``a`` alone, then ``a``
   while ``b`` floods (after a longer warm-up, so the scheduler has adapted).

Prints ``a``'s p50/p99 against the target and the throughput of both models per policy (issue
3's target: ``a``'s p99 under ``adaptive`` <= X). Writes JSON to the results folder
(bench/outputs.py).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.contention import Contention, Pair, build_models, configure
from bench.outputs import add_results_option
from bench.overhead import Timing
from bench.report import Target, check_targets, number
from bench.serving import Layout, machine_state, serve, write_results

A, B = "a", "b"
POLICIES = ("round_robin", "adaptive")


def layouts(slo_p99_ms: float | None) -> dict[str, Layout]:
    scheduling = {"slo_p99_ms": slo_p99_ms} if slo_p99_ms else None
    return {A: Layout(8, {}, 2, 1, scheduling), B: Layout(8, {}, 2, 1)}


def print_report(results: dict[str, Any], pair: Pair, target_ms: float, factor: float) -> None:
    alone = results["round_robin"]["alone"]["steady"]["p99_ms"]
    print(
        f"\n{A} open loop at {pair.rate:g} req/s, slo_p99_ms {target_ms:.2f} ({factor:g} x its "
        f"alone p99 {alone:.2f} ms under round_robin); {B} {pair.concurrency} closed-loop "
        f"clients; small_cnn {pair.image_size}x{pair.image_size}, HTTP binary"
    )
    print(
        f"{'policy':12} {'a alone p99':>11} {'a flooded p50/p99 ms':>21} {'p99/target':>10} "
        f"{'a queue ms':>10} {'a req/s':>8} {'b img/s':>8} {'cpu server/client':>17}"
    )
    for policy in POLICIES:
        r = results[policy]
        flooded = r["flooded"]["steady"]
        print(
            f"{policy:12} {r['alone']['steady']['p99_ms']:>11.2f} "
            f"{flooded['p50_ms']:>10.2f}/{flooded['p99_ms']:<10.2f} "
            f"{flooded['p99_ms'] / target_ms:>10.2f} "
            f"{number(r['flooded']['stats'][A]['queue_ms']):>10} {flooded['rate']:>8.1f} "
            f"{r['flooded']['flood']['rate']:>8.1f} "
            f"{r['flooded']['server_cpu_cores']:>8.2f}/{r['flooded']['client_cpu_cores']:<8.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="adaptive scheduling against a latency target")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per measurement")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before measuring")
    parser.add_argument(
        "--flood-warmup", type=float, default=3.0,
        help="seconds of flood before measuring (the adaptive scheduler adjusts meanwhile)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rate", type=float, default=50.0, help="requests/s to model a")
    parser.add_argument("--concurrency", type=int, default=32, help="clients of model b")
    parser.add_argument("--image-size", type=int, default=96, help="side of the CNNs' images")
    parser.add_argument("--slo-factor", type=float, default=3.0, help="target / alone p99")
    add_results_option(parser)
    args = parser.parse_args()
    alone = Timing(args.duration / 2, args.warmup)
    flood = Timing(args.duration, args.flood_warmup)
    if args.quick:
        alone, flood = Timing(1.5, 0.5), Timing(2.0, 1.5)
    pair = Pair(A, B, args.rate, args.concurrency, args.image_size)
    before = machine_state()

    import uvloop

    results: dict[str, Any] = {}
    target_ms = 0.0
    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        repo = Path(tmp) / "models"
        models = build_models(repo, pair)
        for policy in POLICIES:
            configure(models, layouts(target_ms or None))
            env = {"INFERPLEX_SCHEDULING_POLICY": policy}
            with serve(repo, Path(tmp) / f"{policy}.log", env, list(models)) as served:
                contention = Contention(served, models, pair)
                results[policy] = {"alone": uvloop.run(contention.alone(alone))}
                if not target_ms:
                    p99 = results[policy]["alone"]["steady"]["p99_ms"]
                    target_ms = round(args.slo_factor * p99, 2)
                    print(f"{A} alone p99 {p99:.2f} ms: slo_p99_ms {target_ms}", flush=True)
                results[policy]["flooded"] = uvloop.run(contention.flooded(flood))

    print_report(results, pair, target_ms, args.slo_factor)
    flat = {f"{p}/p99_ms": r["flooded"]["steady"]["p99_ms"] for p, r in results.items()}
    targets = (Target(f"{A} p99 flooded, adaptive", "adaptive/p99_ms", target_ms, "ms"),)
    outcomes = check_targets(targets, flat)
    write_results(
        "slo",
        {
            "options": {**vars(args), "alone_s": alone.duration, "flooded_s": flood.duration},
            "slo_p99_ms": target_ms,
            "results": results,
            "targets": outcomes,
        },
        before,
        folder=args.results_dir,
    )


if __name__ == "__main__":
    main()
