"""What a route, a shadow and a circuit breaker cost, side by side in one run.

    python -m bench.routing [--rounds N] [--duration S] [--warmup S] [--quick]

One server serves ``add_sub`` (FP32 [1,16], dynamic batching) and, over the same model:
``add_sub_guarded`` (a copy with a circuit breaker and a request timeout), the route ``split``
(90/10 between two copies) and the route ``shadowed`` (add_sub, mirrored to a copy). One
client sends one request at a time (closed loop, HTTP binary) to each case, the cases
round-robin over ``--rounds`` rounds, and each keeps its round with the lowest p50. Printed:
p50/p99 and the server's CPU time per request per case, each as a ratio to ``add_sub``
direct. The shadow doubles the model work by design: its CPU ratio shows that; its latency
ratio shows what the client pays for it (nothing, ideally). Then the same cases in-process
(``engine.infer`` in a loop, no sockets): CPU microseconds per call and what each adds to
the direct call, the least noisy figure of the cost in Python.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import measure, open_http
from bench.outputs import add_results_option
from bench.overhead import Timing, add_round_options, round_options
from bench.serving import Served, latency_figures, machine_state, serve, write_results
from examples import modelgen
from inferplex import InferenceRequest, ServerConfig, Tensor
from inferplex.config.writers import write_config
from inferplex.server import build_engine
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST

DIRECT = "add_sub"
CASES = (DIRECT, "add_sub_guarded", "split", "shadowed")
MODELS = (DIRECT, "add_sub_guarded", "add_sub_b", "add_sub_shadow")

ROUTING = """
routes:
  split:
    targets: [{model: add_sub, weight: 9}, {model: add_sub_b, weight: 1}]
  shadowed:
    targets: [{model: add_sub}]
    shadow: {model: add_sub_shadow}
"""


def build(repo: Path) -> None:
    for name in MODELS:
        path = modelgen.add_sub(repo, name=name)
        config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
        if name == "add_sub_guarded":
            config["parameters"] = {"breaker_failures": "5", "request_timeout_ms": "1000"}
        write_config(repo / name, config, fmt="yaml")
    (repo / "routing.yaml").write_text(ROUTING)


async def run_case(served: Served, request: bytes, timing: Timing) -> dict[str, Any]:
    (connection,) = await open_http(HOST, served.server.http_port, 1)
    try:
        outputs = arrays.decode_http_response(*await connection.send(request))
        np.testing.assert_allclose(outputs["OUTPUT0"], 2 * np.arange(16, dtype=np.float32)[None])
        result = await measure(
            [partial(connection.send, request)], timing.duration, timing.warmup, served.cpu
        )
    finally:
        connection.close()
    figures = latency_figures(result)
    figures["server_cpu_us"] = result.summary()["server_cpu_us_per_request"]
    return figures


async def run(repo: Path, rounds: int, timing: Timing) -> dict[str, dict[str, Any]]:
    x = np.arange(16, dtype=np.float32)[None]
    best: dict[str, dict[str, Any]] = {}
    with serve(repo, repo / "server.log", {}, list(MODELS)) as served:
        for round_number in range(rounds):
            for case in CASES:
                request = arrays.http_binary_request(
                    f"{HOST}:{served.server.http_port}",
                    case,
                    {"INPUT0": x, "INPUT1": x},
                    ["OUTPUT0"],
                )
                figures = await run_case(served, request, timing)
                if case not in best or figures["p50_ms"] < best[case]["p50_ms"]:
                    best[case] = figures
            print(f"round {round_number + 1}/{rounds} done", flush=True)
    return best


async def in_process(repo: Path, rounds: int, calls: int) -> dict[str, float]:
    """Median CPU microseconds (every thread of this process) per ``engine.infer`` call per
    case, no sockets: what the route, the guard and the shadow add in Python. CPU time is
    far less disturbed by other processes than wall time."""
    x = np.arange(16, dtype=np.float32)[None]
    inputs = [Tensor("INPUT0", "FP32", x.shape, x), Tensor("INPUT1", "FP32", x.shape, x)]
    engine = build_engine(ServerConfig(model_repository=repo))
    await engine.start()
    per_round: dict[str, list[float]] = {case: [] for case in CASES}
    try:
        for _ in range(rounds):
            for case in CASES:
                for _ in range(50):  # warm-up
                    await engine.infer(InferenceRequest(case, inputs))
                start = time.process_time()
                for _ in range(calls):
                    await engine.infer(InferenceRequest(case, inputs))
                per_round[case].append((time.process_time() - start) / calls * 1e6)
    finally:
        await engine.stop()
    return {case: round(float(np.median(values)), 1) for case, values in per_round.items()}


def report(best: dict[str, dict[str, Any]], local: dict[str, float]) -> dict[str, Any]:
    base = best[DIRECT]
    print("\nadd_sub FP32 [1,16], one client, HTTP binary (best round by p50)")
    print(
        f"{'case':16} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'CPU us':>8} "
        f"{'p50 x':>7} {'CPU x':>7}"
    )
    ratios: dict[str, Any] = {}
    for case in CASES:
        f = best[case]
        p50_ratio = f["p50_ms"] / base["p50_ms"]
        cpu_ratio = f["server_cpu_us"] / base["server_cpu_us"]
        ratios[case] = {"p50": round(p50_ratio, 3), "server_cpu": round(cpu_ratio, 3)}
        print(
            f"{case:16} {f['p50_ms']:>8.3f} {f['p99_ms']:>8.3f} {f['rate']:>8.1f} "
            f"{f['server_cpu_us']:>8.1f} {p50_ratio:>7.3f} {cpu_ratio:>7.3f}"
        )
    print("\nin-process engine.infer, one caller: CPU us per call (median of the rounds)")
    print(f"{'case':16} {'CPU us':>8} {'ratio':>7} {'added us':>9}")
    for case in CASES:
        print(
            f"{case:16} {local[case]:>8.1f} {local[case] / local[DIRECT]:>7.3f} "
            f"{local[case] - local[DIRECT]:>9.1f}"
        )
    return {"ratios_to_direct": ratios, "in_process_us_per_call": local}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_round_options(parser, duration=3.0, warmup=1.0, rounds=3)
    add_results_option(parser)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(1.0, 0.3))
    before = machine_state()
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        build(repo)
        best = asyncio.run(run(repo, rounds, timing))
        local = asyncio.run(in_process(repo, max(rounds, 3), 300 if args.quick else 2000))
    summary = report(best, local)
    options = {"rounds": rounds, "duration": timing.duration, "warmup": timing.warmup}
    write_results(
        "routing", {"options": options, "cases": best, **summary}, before, folder=args.results_dir
    )


if __name__ == "__main__":
    main()
