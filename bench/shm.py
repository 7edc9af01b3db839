"""System shared memory against data in the request, for a large tensor, in one run.

    python -m bench.shm [--requests N] [--rounds N] [--quick]

Builds an FP32 identity model with examples.modelgen, starts the real server with
``--allow-shared-memory`` and sends a 3x1024x1024 FP32 tensor (12 MiB; sent as
``[3, 1048576]``, the identity model is rank 2) with tritonclient, one request at a time,
four ways:

- ``http-binary``: input and output in the body (Triton's binary tensor extension);
- ``http-shm``: input and output in system shared memory, only names and offsets in the body;
- ``grpc``: input in ``raw_input_contents``, output in ``raw_output_contents``;
- ``grpc-shm``: input and output in system shared memory.

A shared-memory request's time includes what a client has to do on its side: copy the input
into its region and take the output from its region (a numpy view). Each case runs
``--requests`` requests per round; the rounds are interleaved round-robin so that unrelated
load hits all cases alike; the figures are the median (p50) and mean over every round's
requests, and the ratio with shared memory / without, per protocol. Writes JSON to
the results folder (bench/outputs.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from bench.outputs import add_results_option, result_path
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

SHAPE = [3, 1024 * 1024]  # 3x1024x1024 FP32
MODEL = "identity_fp32"
CASES = ("http-binary", "http-shm", "grpc", "grpc-shm")

Call = Callable[[], np.ndarray]


class Client:
    """One protocol's client with its two regions: ``plain()`` and ``shared()`` each run one
    request and return the output."""

    def __init__(self, module: Any, triton: Any, data: np.ndarray) -> None:
        self.module = module
        self.triton = triton
        self.data = data
        nbytes = data.nbytes
        tag = uuid.uuid4().hex[:8]
        self.regions = []
        for role in ("in", "out"):
            name = f"bench_{role}_{tag}"
            handle = shm.create_shared_memory_region(name, f"/{name}", nbytes)
            triton.register_system_shared_memory(name, f"/{name}", nbytes)
            self.regions.append((name, handle))
        # where the client puts its input: a view of its region, written in place
        self.input_view = shm.get_contents_as_numpy(self.regions[0][1], np.float32, SHAPE)
        self.plain_input = module.InferInput("INPUT0", SHAPE, "FP32")
        self.shared_input = module.InferInput("INPUT0", SHAPE, "FP32")
        self.shared_input.set_shared_memory(self.regions[0][0], nbytes)
        self.shared_output = module.InferRequestedOutput("OUTPUT0")
        self.shared_output.set_shared_memory(self.regions[1][0], nbytes)
        http = module is httpclient
        self.plain_output = (
            module.InferRequestedOutput("OUTPUT0", binary_data=True)
            if http
            else module.InferRequestedOutput("OUTPUT0")
        )

    def plain(self) -> np.ndarray:
        self.plain_input.set_data_from_numpy(self.data)
        result = self.triton.infer(MODEL, [self.plain_input], outputs=[self.plain_output])
        return result.as_numpy("OUTPUT0")

    def shared(self) -> np.ndarray:
        np.copyto(self.input_view, self.data)
        self.triton.infer(MODEL, [self.shared_input], outputs=[self.shared_output])
        return shm.get_contents_as_numpy(self.regions[1][1], np.float32, SHAPE)

    def close(self) -> None:
        del self.input_view
        self.triton.unregister_system_shared_memory()
        for _, handle in self.regions:
            shm.destroy_shared_memory_region(handle)
        self.triton.close()


def run(server: RunningServer, requests: int, rounds: int) -> dict[str, list[float]]:
    data = np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
    http = Client(httpclient, httpclient.InferenceServerClient(server.http_url), data)
    grpc = Client(grpcclient, grpcclient.InferenceServerClient(server.grpc_url), data)
    calls: dict[str, Call] = {
        "http-binary": http.plain,
        "http-shm": http.shared,
        "grpc": grpc.plain,
        "grpc-shm": grpc.shared,
    }
    times: dict[str, list[float]] = {case: [] for case in CASES}
    try:
        for case, call in calls.items():  # warm-up, and every path answers correctly
            if not np.array_equal(call(), data):
                raise RuntimeError(f"{case}: the output differs from the input")
        for index in range(rounds):
            for case, call in calls.items():
                for _ in range(requests):
                    start = time.perf_counter()
                    call()
                    times[case].append(time.perf_counter() - start)
            print(f"round {index + 1}/{rounds} done", flush=True)
    finally:
        http.close()
        grpc.close()
    return times


def figures(times: dict[str, list[float]]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for case, values in times.items():
        flat[f"{case}/p50_ms"] = statistics.median(values) * 1e3
        flat[f"{case}/mean_ms"] = statistics.fmean(values) * 1e3
        flat[f"{case}/requests"] = len(values)
    for protocol, plain in (("http", "http-binary"), ("grpc", "grpc")):
        flat[f"{protocol}/shm_over_plain_p50"] = (
            flat[f"{protocol}-shm/p50_ms"] / flat[f"{plain}/p50_ms"]
        )
    return flat


def report(flat: dict[str, Any]) -> None:
    mib = np.prod(SHAPE) * 4 / 2**20
    print(f"\nidentity FP32 3x1024x1024 ({mib:.0f} MiB in, {mib:.0f} MiB out), concurrency 1")
    print(f"{'case':12} {'p50 ms':>8} {'mean ms':>8} {'requests':>9}")
    for case in CASES:
        print(
            f"{case:12} {flat[f'{case}/p50_ms']:>8.2f} {flat[f'{case}/mean_ms']:>8.2f} "
            f"{flat[f'{case}/requests']:>9}"
        )
    for protocol in ("http", "grpc"):
        ratio = flat[f"{protocol}/shm_over_plain_p50"]
        print(f"{protocol}: shared memory / in the request, p50: {ratio:.2f} ({1 / ratio:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description="system shared memory vs data in the request")
    parser.add_argument("--requests", type=int, default=15, help="requests per case and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    add_results_option(parser)
    args = parser.parse_args()
    requests, rounds = (3, 1) if args.quick else (args.requests, args.rounds)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        repo = Path(tmp) / "models"
        path = modelgen.identity(repo, "FP32")
        write_config(path.parent.parent, modelgen.model_config(path))
        print("starting the server", flush=True)
        server = start_server(
            repo,
            Path(tmp) / "server.log",
            env={"INFERPLEX_ALLOW_SHARED_MEMORY": "true", "INFERPLEX_LOG_LEVEL": "warning"},
        )
        try:
            times = run(server, requests, rounds)
        finally:
            code = server.stop()
            if code != 0:
                print(f"server exited with {code}:\n{server.log()[-3000:]}", file=sys.stderr)
    flat = figures(times)
    report(flat)
    out = result_path("shm", args.results_dir)
    document = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0],
        },
        "options": {"requests": requests, "rounds": rounds, "shape": SHAPE},
        "figures": flat,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
