"""The camera-frame pipeline end to end beside its branches alone, in one run.

    python -m bench.pipeline [--rounds N] [--duration S] [--warmup S] [--quick]

Builds the example's models (``examples/build_models.py``: face_detect -> face_embed beside
object_classify and behaviour_classify, one intra-op thread each) and, beside the
``camera_pipeline`` ensemble, a ``face_branch`` ensemble of the first two steps alone, then
serves them in one server. One client sends one 128x128 frame at a time (HTTP binary), to
each case in turn (pipeline, face branch, object, behaviour, pipeline, ...), so every case
sees the same machine: on a shared machine a round of one case would meet other load than a
round of the next. ``--rounds`` rounds of ``--duration`` seconds; each case keeps its round
with the lowest p50. Printed: p50/p99 per case, the pipeline's p50
against the slowest branch alone and against the sum of the branches (what running the steps
one after the other costs). Issue 5's target: pipeline p50 <= 1.2 x the slowest branch.
The answers of the pipeline are checked against the four models run in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import Measurement, open_http
from bench.outputs import add_results_option
from bench.overhead import Timing, add_round_options, round_options
from bench.report import Target, check_targets
from bench.serving import (
    Check,
    latency_figures,
    machine_state,
    output_check,
    reference,
    serve,
    write_results,
)
from examples import modelgen
from examples.build_models import CAMERA_STEPS, build_camera_pipeline, write_ensemble
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST

PIPELINE = "camera_pipeline"
FACE_BRANCH = "face_branch"
#: each branch of the pipeline as one served model (the face branch is an ensemble itself)
BRANCHES = (FACE_BRANCH, "object_classify", "behaviour_classify")
CASES = (PIPELINE, *BRANCHES)
TARGET = Target("pipeline p50 / slowest branch p50", "ratio_slowest", 1.2, "x")


def build(repo: Path) -> None:
    build_camera_pipeline(repo, PIPELINE)
    write_ensemble(repo, FACE_BRANCH, CAMERA_STEPS[:2])


def expected(repo: Path, frame: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """Each case's answer from in-process ONNX Runtime, the steps chained by hand."""

    def run(model: str, image: np.ndarray) -> np.ndarray:
        path = repo / model / "1" / modelgen.MODEL_FILENAME
        return next(iter(reference(path, {"image": image}).values()))

    face = run("face_detect", frame)
    embedding = run("face_embed", face)
    objects = run("object_classify", frame)
    behaviour = run("behaviour_classify", frame)
    return {
        PIPELINE: {"face_embedding": embedding, "objects": objects, "behaviour": behaviour},
        FACE_BRANCH: {"face_embedding": embedding},
        "object_classify": {"logits": objects},
        "behaviour_classify": {"logits": behaviour},
    }


async def interleaved(
    port: int, requests: dict[str, bytes], checks: dict[str, Check], timing: Timing
) -> dict[str, dict[str, Any]]:
    """One request to each case in turn, over one connection per case, for ``timing``; the
    first and the last answer of every case are checked."""
    connections = dict(zip(requests, await open_http(HOST, port, len(requests)), strict=True))
    latencies: dict[str, list[int]] = {case: [] for case in requests}
    try:
        for case, connection in connections.items():
            checks[case](arrays.decode_http_response(*await connection.send(requests[case])))
        clock = time.perf_counter_ns
        start = clock()
        warm_until = start + int(timing.warmup * 1e9)
        end = warm_until + int(timing.duration * 1e9)
        while clock() < end:
            for case, connection in connections.items():
                sent = clock()
                await connection.send(requests[case])
                if sent >= warm_until:
                    latencies[case].append(clock() - sent)
        for case, connection in connections.items():
            checks[case](arrays.decode_http_response(*await connection.send(requests[case])))
    finally:
        for connection in connections.values():
            connection.close()
    seconds = timing.duration
    return {
        case: latency_figures(Measurement(seconds, values)) for case, values in latencies.items()
    }


async def run(repo: Path, rounds: int, timing: Timing) -> dict[str, dict[str, Any]]:
    frame = np.random.default_rng(0).random((1, 3, 128, 128), dtype=np.float32)
    answers = expected(repo, frame)
    best: dict[str, dict[str, Any]] = {}
    p50s: dict[str, list[float]] = {case: [] for case in CASES}
    with serve(repo, repo / "server.log", {}, list(CASES)) as served:
        port = served.server.http_port
        requests = {
            case: arrays.http_binary_request(
                f"{HOST}:{port}",
                case,
                {"frame" if case in (PIPELINE, FACE_BRANCH) else "image": frame},
                list(answers[case]),
            )
            for case in CASES
        }
        checks = {case: output_check(answers[case], case, atol=1e-4) for case in CASES}
        for round_number in range(rounds):
            measured = await interleaved(port, requests, checks, timing)
            for case, figures in measured.items():
                p50s[case].append(figures["p50_ms"])
                if case not in best or figures["p50_ms"] < best[case]["p50_ms"]:
                    best[case] = figures
            print(f"round {round_number + 1}/{rounds} done", flush=True)
    for case in CASES:
        best[case]["round_p50s"] = p50s[case]
    return best


def report(best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    slowest = max(BRANCHES, key=lambda b: best[b]["p50_ms"])
    total = sum(best[b]["p50_ms"] for b in BRANCHES)
    pipeline = best[PIPELINE]["p50_ms"]
    print("\ncamera frame FP32 [1,3,128,128], one client, cases in turn, HTTP binary")
    print("(each case's round with the lowest p50)")
    print(f"{'case':20} {'p50 ms':>8} {'p99 ms':>8} {'requests':>8}   round p50s")
    for case in CASES:
        figures = best[case]
        print(
            f"{case:20} {figures['p50_ms']:>8.3f} {figures['p99_ms']:>8.3f} "
            f"{figures['requests']:>8}   {figures['round_p50s']}"
        )
    flat = {
        "slowest_branch": slowest,
        "sum_of_branches_ms": round(total, 3),
        "ratio_slowest": round(pipeline / best[slowest]["p50_ms"], 3),
        "ratio_sum": round(pipeline / total, 3),
    }
    print(
        f"\npipeline p50 {pipeline:.3f} ms; slowest branch ({slowest}) "
        f"{best[slowest]['p50_ms']:.3f} ms: ratio {flat['ratio_slowest']:.3f}; sum of the "
        f"branches {total:.3f} ms: ratio {flat['ratio_sum']:.3f}"
    )
    flat["targets"] = check_targets([TARGET], flat)
    return flat


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
    summary = report(best)
    options = {"rounds": rounds, "duration": timing.duration, "warmup": timing.warmup}
    path = write_results(
        "pipeline", {"options": options, "cases": best, **summary}, before, folder=args.results_dir
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
