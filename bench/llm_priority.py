"""A priority vision model's latency while an LLM saturates the same server (issue 34's
target: its p99 with the LLM at concurrency 16 within 1.5x of its p99 alone).

    python -m bench.llm_priority [--policy priority|round_robin|adaptive] [--rate 40]
                                 [--concurrency 16] [--duration 20] [--warmup 3] [--small]

One server, ``--scheduling-policy`` as given: ``vision`` (``modelgen.small_cnn`` at 96x96,
2 instances x 1 thread, dynamic batching, ``scheduling { weight: 8 }``; with ``adaptive``
also ``slo_p99_ms: --slo-ms``) and ``llm`` (the reference model of bench/llm_vs_vllm.py, its
engine on 1 thread, default weight 1: each engine step takes a compute slot the scheduler
weighs, docs/llm.md). ``vision`` gets requests open loop at ``--rate``/s over HTTP, first
alone, then while ``--concurrency`` streams of 128-token prompts and 64 output tokens keep
the LLM busy (bench/llm_client.py, through ``/generate_stream``) over the same window.
Prints vision's p50/p99 alone and with the LLM, their ratio, and the LLM's tokens/s and ITL
meanwhile; writes JSON to the results folder. ``--small``: a tiny LLM, a smoke test.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.llm_client import INFERPLEX, Job, Target, drive
from bench.llm_vs_vllm import MODEL, build_model, prompts
from bench.outputs import add_results_option, result_path
from bench.overhead import Timing
from bench.serving import (
    Layout,
    latency_figures,
    open_http_load,
    output_check,
    reference,
    write_model,
)
from examples import modelgen
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST, start_server

VISION = "vision"


def _vision(repository: Path, args: argparse.Namespace) -> tuple[bytes, Any]:
    """The vision model written into ``repository``: (its HTTP request, the answer check)."""
    path = modelgen.small_cnn(repository, name=VISION, image_size=96, seed=0)
    scheduling: dict[str, Any] = {"weight": 8}
    if args.policy == "adaptive":
        scheduling["slo_p99_ms"] = args.slo_ms
    write_model(path, Layout(instances=2, threads=1, scheduling=scheduling))
    image = np.random.default_rng(0).random((1, 3, 96, 96), dtype=np.float32)
    expected = reference(path, {"image": image})
    request = arrays.http_binary_request(HOST, VISION, {"image": image}, list(expected))
    return request, output_check(expected, "vision over http-binary")


async def _measure(
    port: int, request: bytes, check: Any, args: argparse.Namespace, llm: Target | None
) -> dict[str, Any]:
    """Vision's latency over the window, alone (``llm`` None) or beside the LLM's streams."""
    timing = Timing(args.duration, args.warmup)
    steady = open_http_load(port, request, args.rate, check, timing)
    if llm is None:
        return {"vision": latency_figures(await steady)}
    jobs = itertools.cycle([Job(t, args.osl) for t in args.texts])
    until = time.perf_counter() + args.warmup + args.duration
    flood = asyncio.to_thread(drive, llm, jobs, args.concurrency, until)
    vision, load = await asyncio.gather(steady, flood)
    return {"vision": latency_figures(vision), "llm": load.as_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policy", default="priority", choices=["priority", "round_robin", "adaptive"]
    )
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--slo-ms", type=float, default=20.0)
    parser.add_argument("--osl", type=int, default=64)
    parser.add_argument("--work", type=Path, default=Path("/tmp/inferplex-llm-bench"))
    parser.add_argument("--small", action="store_true", help="a tiny LLM: a smoke test")
    add_results_option(parser)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    repository = build_model(args.work / f"priority-{args.policy}", args.small, 256 << 20, 1)
    args.texts = prompts(repository / MODEL / "1", 32, 32 if args.small else 128, 1)
    request, check = _vision(repository, args)
    env = {"INFERPLEX_SCHEDULING_POLICY": args.policy, "INFERPLEX_LOG_LEVEL": "warning"}
    server = start_server(repository, args.work / "priority.log", env=env, deadline=300)
    try:
        llm = Target(INFERPLEX, f"http://{server.http_url}", MODEL)
        drive(llm, [Job(args.texts[0], 4)], 1)  # the engine's first step, untimed
        alone = asyncio.run(_measure(server.http_port, request, check, args, None))
        loaded = asyncio.run(_measure(server.http_port, request, check, args, llm))
    finally:
        server.stop()
    ratio = loaded["vision"]["p99_ms"] / alone["vision"]["p99_ms"]
    print(f"policy {args.policy}, vision at {args.rate}/s, LLM at c{args.concurrency}")
    for label, figures in (("alone", alone), ("with LLM", loaded)):
        vision = figures["vision"]
        print(f"  vision {label:9} p50 {vision['p50_ms']:8.2f} ms  p99 {vision['p99_ms']:8.2f} ms")
    print(f"  p99 with / alone {ratio:.2f}x (target <= 1.5x)")
    llm_figures = loaded["llm"]
    print(
        f"  LLM meanwhile    {llm_figures['output_token_throughput']:.1f} tok/s, "
        f"ITL p50 {llm_figures['itl_p50_ms']:.2f} ms, {llm_figures['requests']} requests"
    )
    settings = {k: str(v) for k, v in vars(args).items() if k != "texts"}
    document = {"args": settings, "alone": alone}
    document |= {"with_llm": loaded, "p99_ratio": ratio}
    path = result_path("llm_priority", args.results_dir)
    path.write_text(json.dumps(document, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
