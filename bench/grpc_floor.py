"""inferplex's gRPC server (its own HTTP/2, transport/grpc_server.py) next to a bare grpc.aio
server that does nothing, in one run: the evidence for leaving grpc.aio.

    python -m bench.grpc_floor [--duration S] [--rounds N] [--quick]

The bare server is grpc.aio on uvloop with one generic ``ModelInfer`` handler, no
(de)serialisers, answering every call with a canned response (the right answer, so the
client's checks pass): the least any grpc.aio server can spend per call. It runs in its own
process, like the real server (``python -m inferplex serve``), and both are driven by the same
client as ``bench.overhead`` (one grpc.aio channel, pre-serialised requests) with add_sub at
concurrency 1 and 16 and small_cnn at concurrency 4. The ratios (inferplex / bare) below 1
mean inferplex, running the model, spends less than grpc.aio doing nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import psutil

from bench.overhead import (
    Case,
    Results,
    Timing,
    add_round_options,
    build_repository,
    grpc_load,
    inprocess_session,
    round_options,
    run_rounds,
    served_case,
)
from inferplex.protocol.v2 import grpc_codec
from inferplex.types import InferenceResponse, Tensor
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST, RunningServer, free_port, start_server

SERVICE = "inference.GRPCInferenceService"


def serve_canned(port: int, responses: dict[str, bytes]) -> None:
    """Serve ``ModelInfer`` on ``port``, answering with ``responses[model name]``."""
    import grpc
    import uvloop

    def model_name(request: bytes) -> str:
        # field 1 (model_name) comes first in every serialised request the client sends
        return request[2 : 2 + request[1]].decode()

    async def infer(request: bytes, context: object) -> bytes:
        return responses[model_name(request)]

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.unary_unary_rpc_method_handler(infer)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"ModelInfer": handler}),)
        )
        server.add_insecure_port(f"{HOST}:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    uvloop.run(main())


def canned_response(model: str, outputs: arrays.Arrays) -> bytes:
    """The serialised ModelInferResponse inferplex answers with for these outputs."""
    tensors = [Tensor(name, "FP32", array.shape, array) for name, array in outputs.items()]
    return grpc_codec.encode_infer_response_bytes(InferenceResponse(model, "1", tensors))


def start_floor(folder: Path, responses: dict[str, bytes]) -> tuple[subprocess.Popen[bytes], int]:
    """The bare server in a child process; returns it once it listens."""
    for model, response in responses.items():
        (folder / f"{model}.bin").write_bytes(response)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.grpc_floor", "--serve", str(port), str(folder)],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != b"ready":
        process.kill()
        raise RuntimeError("the bare gRPC server did not start")
    return process, port


def floor_case(
    process: subprocess.Popen[bytes],
    port: int,
    model: str,
    inputs: arrays.Arrays,
    expected: arrays.Arrays,
    concurrency: int,
) -> Case:
    """A load case against the bare server, checked and timed like ``served_case``."""
    clock = psutil.Process(process.pid)

    def cpu() -> float:
        times = clock.cpu_times()
        return times.user + times.system

    def check(outputs: dict[str, np.ndarray]) -> None:
        arrays.check_outputs(outputs, expected=expected, what=f"{model} from the bare server")

    request = arrays.grpc_request(model, inputs, list(expected))
    return partial(grpc_load, f"{HOST}:{port}", request, concurrency, check, cpu)


def cnn_image() -> np.ndarray:
    """The small_cnn input of ``bench.overhead``."""
    return np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)


def model_data(
    image: np.ndarray, logits: np.ndarray
) -> dict[str, tuple[arrays.Arrays, arrays.Arrays]]:
    """(inputs, expected outputs) by model: the requests of ``bench.overhead``."""
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    return {
        "add_sub": ({"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b}),
        "small_cnn": ({"image": image}, {"logits": logits}),
    }


def cases(
    server: RunningServer,
    floor: subprocess.Popen[bytes],
    port: int,
    data: dict[str, tuple[arrays.Arrays, arrays.Arrays]],
) -> dict[str, Case]:
    """Each load on the bare server, then on inferplex."""
    all_cases: dict[str, Case] = {}
    for model, concurrency in (("add_sub", 1), ("add_sub", 16), ("small_cnn", 4)):
        inputs, expected = data[model]
        key = f"{model}/c{concurrency}"
        all_cases[f"bare/{key}"] = floor_case(floor, port, model, inputs, expected, concurrency)
        all_cases[f"inferplex/{key}"] = served_case(
            server, "grpc", model, inputs, expected, concurrency, atol=1e-3
        )
    return all_cases


def print_results(results: Results) -> None:
    print(
        "\ngRPC, same client; bare = grpc.aio answering canned bytes (the floor); "
        "CPU = server process user+sys / requests"
    )
    print(
        f"{'server':10} {'case':14} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'server µs/req':>14}"
        f" {'p50 / bare':>11} {'CPU / bare':>11}"
    )
    for key, (best, _) in results.items():
        stack, case = key.split("/", 1)
        figures = best.summary()
        line = (
            f"{stack:10} {case:14} {figures['rate']:>8.0f} {figures['p50_ms']:>8.3f} "
            f"{figures['p99_ms']:>8.3f} {figures['server_cpu_us_per_request']:>14}"
        )
        if stack == "inferplex":
            bare = results[f"bare/{case}"][0].summary()
            p50, cpu = (
                _ratio(figures[name], bare[name])
                for name in ("p50_ms", "server_cpu_us_per_request")
            )
            line += f" {p50:>10.2f}x {cpu:>10.2f}x"
        print(line)


def _ratio(value: float | None, base: float | None) -> float:
    """value / base, NaN where either was not measured."""
    return value / base if value is not None and base else float("nan")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        folder = Path(sys.argv[3])
        serve_canned(int(sys.argv[2]), {p.stem: p.read_bytes() for p in folder.glob("*.bin")})
        return
    parser = argparse.ArgumentParser(description="inferplex gRPC vs a bare grpc.aio server")
    add_round_options(parser, duration=1.5, warmup=0.5, rounds=3)
    rounds, timing = round_options(parser.parse_args(), quick=Timing(0.5, 0.2))
    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        folder = Path(tmp)
        threads = os.cpu_count() or 1
        session = inprocess_session(build_repository(folder / "models", threads), threads)
        image = cnn_image()
        data = model_data(image, session.run(None, {"image": image})[0])
        responses = {
            model: canned_response(model, expected) for model, (_, expected) in data.items()
        }
        floor, port = start_floor(folder, responses)
        server = start_server(
            folder / "models", folder / "server.log", env={"INFERPLEX_LOG_LEVEL": "warning"}
        )
        try:
            import uvloop

            results = uvloop.run(run_rounds(cases(server, floor, port, data), rounds, timing))
        finally:
            server.stop()
            floor.terminate()
            floor.wait()
    print_results(results)


if __name__ == "__main__":
    main()
