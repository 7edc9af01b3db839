"""Throughput of one replica against three behind nginx, side by side in one run.

    python -m bench.scale_out [--duration S] [--rounds N] [--quick] [--threads N]

Starts three ``inferplex serve`` replicas on loopback and nginx in front of them with the
shipped configuration (deploy/nginx/nginx.conf.template), then measures, over HTTP binary and
gRPC, add_sub (overhead-bound, concurrency 16) and small_cnn (compute-bound, concurrency 4):

- ``direct-1``: one replica, no nginx (what nginx costs is the gap to ``nginx-1``);
- ``nginx-1``: nginx with the other two replicas marked ``down``;
- ``nginx-3``: nginx balancing over all three.

Cases run ``--rounds`` times, interleaved; each reports its best round. Server CPU is the sum
over the replicas. All replicas share the machine's cores, so on a small machine three
replicas gain little or nothing: the scale-out test (tests/deploy/test_scale_out.py) is about
correct draining and balancing; this is about what it costs. Needs nginx
(scripts/system_packages.sh installs it) and the bench extra.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import psutil
import uvloop

from bench.loadgen import Measurement
from bench.overhead import (
    Timing,
    add_round_options,
    build_repository,
    grpc_load,
    http_load,
    inprocess_session,
    round_options,
)
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.cluster import Nginx, start_nginx, start_replica
from inferplex_tools.benchtool.launch import RunningServer

TOPOLOGIES = ("direct-1", "nginx-1", "nginx-3")
PROTOCOLS = ("http-binary", "grpc")
REPLICAS = 3

Case = Callable[[Timing], Awaitable[Measurement]]


def workloads(cnn_model: Path) -> dict[str, tuple[arrays.Arrays, arrays.Arrays, int, float]]:
    """Per model: inputs, expected outputs, concurrency, tolerance."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    logits = inprocess_session(cnn_model, 1).run(None, {"image": image})[0]
    return {
        "add_sub": ({"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}, 16, 0.0),
        # Dynamic batching may group images: allow for summation-order differences.
        "small_cnn": ({"image": image}, {"logits": logits}, 4, 1e-3),
    }


def cases(
    replicas: Sequence[RunningServer], balancer: Nginx, cnn_model: Path
) -> dict[str, tuple[str, Case]]:
    """``model/protocol/topology`` -> (topology, case)."""
    processes = [psutil.Process(r.process.pid) for r in replicas]

    def cpu() -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in processes))

    all_cases: dict[str, tuple[str, Case]] = {}
    for model, (inputs, expected, concurrency, atol) in workloads(cnn_model).items():
        check = partial(arrays.check_outputs, expected=expected, what=model, atol=atol)
        for protocol in PROTOCOLS:
            for topology in TOPOLOGIES:
                direct = topology == "direct-1"
                if protocol == "grpc":
                    target = replicas[0].grpc_url if direct else balancer.grpc_url
                    request = arrays.grpc_request(model, inputs, list(expected))
                    case = partial(grpc_load, target, request, concurrency, check, cpu)
                else:
                    port = replicas[0].http_port if direct else balancer.http_port
                    request = arrays.http_binary_request("127.0.0.1", model, inputs, list(expected))
                    case = partial(http_load, port, request, concurrency, check, cpu)
                all_cases[f"{model}/{protocol}/{topology}"] = (topology, case)
    return all_cases


async def run_rounds(
    all_cases: dict[str, tuple[str, Case]],
    replicas: Sequence[RunningServer],
    balancer: Nginx,
    rounds: int,
    timing: Timing,
) -> dict[str, Measurement]:
    """Every case ``rounds`` times, round-robin; nginx is reloaded when the topology changes."""
    runs: dict[str, list[Measurement]] = {key: [] for key in all_cases}
    serving = REPLICAS
    for number in range(1, rounds + 1):
        print(f"round {number}/{rounds}", flush=True)
        for key, (topology, case) in all_cases.items():
            wanted = 1 if topology == "nginx-1" else REPLICAS
            if topology != "direct-1" and wanted != serving:
                balancer.reload(replicas, down=set(range(wanted, REPLICAS)))
                serving = wanted
            runs[key].append(await case(timing))
    return {key: max(measured, key=lambda m: m.rate) for key, measured in runs.items()}


def report(best: dict[str, Measurement]) -> None:
    print("\nbest round per case; server CPU = sum over the replicas / requests")
    header = f"{'model':10} {'protocol':12} {'topology':9} {'req/s':>9} {'p50 ms':>8}"
    print(f"{header} {'p99 ms':>8} {'CPU µs/req':>11} {'vs nginx-1':>10}")
    for key, measured in best.items():
        model, protocol, topology = key.split("/")
        baseline = best[f"{model}/{protocol}/nginx-1"].rate
        cpu = measured.per_request_us(measured.server_cpu_seconds)
        print(
            f"{model:10} {protocol:12} {topology:9} {measured.rate:9.1f} "
            f"{measured.percentile_ms(50):8.3f} {measured.percentile_ms(99):8.3f} "
            f"{cpu or float('nan'):11.1f} {measured.rate / baseline:10.3f}"
        )
    print("\n3 replicas / 1 replica through nginx:")
    for model in ("add_sub", "small_cnn"):
        for protocol in PROTOCOLS:
            three = best[f"{model}/{protocol}/nginx-3"].rate
            one = best[f"{model}/{protocol}/nginx-1"].rate
            print(f"  {model:10} {protocol:12} {three / one:6.2f}x  ({one:.0f} -> {three:.0f}/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description="1 vs 3 replicas behind nginx")
    add_round_options(parser, duration=1.5, warmup=0.5, rounds=3)
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1,
        help="intra-op threads of each replica's sessions",
    )  # fmt: skip
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(0.5, 0.2))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    env = {"INFERPLEX_INTRA_OP_THREADS": str(args.threads), "INFERPLEX_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory(prefix="inferplex-scale-out-") as tmp:
        repo = Path(tmp) / "models"
        cnn_model = build_repository(repo, args.threads)
        replicas: list[RunningServer] = []
        balancer: Nginx | None = None
        try:
            for index in range(REPLICAS):
                log = Path(tmp) / f"replica{index}.log"
                replicas.append(start_replica(repo, log, env=env))
            balancer = start_nginx(Path(tmp) / "nginx", replicas)
            all_cases = cases(replicas, balancer, cnn_model)
            best = uvloop.run(run_rounds(all_cases, replicas, balancer, rounds, timing))
        finally:
            if balancer is not None:
                balancer.stop()
            for replica in replicas:
                replica.stop()
    report(best)


if __name__ == "__main__":
    main()
