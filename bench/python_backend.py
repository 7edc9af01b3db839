"""The Python backend's cost per request: the same add_sub computed in-process and through a
handler's worker process, measured side by side in one run.

    python -m bench.python_backend [--rounds N] [--calls N] [--quick]

Cases, each at two tensor sizes (FP32 ``[1, 16]`` and ``[1, 262144]`` = 1 MiB per input):

- ``handler in-thread``: the numpy handler (``OUTPUT0 = a + b``, ``OUTPUT1 = a - b``) called
  directly in this process through the same Runner the worker uses: the computation alone;
- ``handler in worker``: ``PythonBackend.execute`` — headers over the pipe, tensors through
  the shared-memory arena, the worker's reply; the difference to the line above is the
  process hop;
- ``onnx backend``: ``OnnxRuntimeBackend.execute`` of the ONNX add_sub, for scale;
- ``engine: onnx`` / ``engine: python``: ``InferenceEngine.infer`` at concurrency 1 on the
  ONNX model and on the Python model (validation, queue, dispatcher, worker thread, split):
  what a client of the in-process API sees, without sockets.

Rounds are interleaved; each case keeps its best round's median (the round least disturbed by
anything else on the machine). Prints the medians, p99s and the ratios python / in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from examples import modelgen
from inferplex.backends.base import InstanceSpec
from inferplex.backends.onnxruntime import OnnxRuntimeBackend
from inferplex.backends.python import PythonBackend
from inferplex.backends.python.runner import find_class, load_module
from inferplex.backends.python.styles import make_runner
from inferplex.config.model_config import ModelConfig
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.handler.base import Context
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor

HANDLER = """
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        a, b = data["INPUT0"], data["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
"""
SIZES = (16, 262_144)
OUTPUTS = ["OUTPUT0", "OUTPUT1"]


def python_config(dims: int) -> ModelConfig:
    tensor = {"data_type": "FP32", "dims": [dims]}
    return ModelConfig.model_validate(
        {
            "name": f"py_add_sub_{dims}",
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": n, **tensor} for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, **tensor} for n in OUTPUTS],
        }
    )


def build(repo: Path) -> None:
    for dims in SIZES:
        path = modelgen.add_sub(repo, name=f"add_sub_{dims}", dims=dims)
        write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
        model_dir = repo / f"py_add_sub_{dims}"
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(HANDLER)
        tensor = {"data_type": "TYPE_FP32", "dims": [dims]}
        config = {
            "name": model_dir.name,
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": n, **tensor} for n in ("INPUT0", "INPUT1")],
            "output": [{"name": n, **tensor} for n in OUTPUTS],
            "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        }
        write_config(model_dir, config)


def timed(call: Callable[[], object], calls: int) -> list[float]:
    """Microseconds per call."""
    out = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        out.append((time.perf_counter_ns() - start) / 1e3)
    return out


async def timed_async(
    engine: InferenceEngine, request: InferenceRequest, calls: int
) -> list[float]:
    out = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await engine.infer(request)
        out.append((time.perf_counter_ns() - start) / 1e3)
    return out


async def run(args: argparse.Namespace) -> None:
    repo = Path(tempfile.mkdtemp(prefix="bench_python_"))
    build(repo)
    engine = build_engine(ServerConfig(model_repository=repo, intra_op_threads=1))
    await engine.start()
    cases: dict[tuple[int, str], Callable[[int], object]] = {}
    closers = []
    try:
        for dims in SIZES:
            a = np.random.default_rng(0).standard_normal((1, dims)).astype(np.float32)
            feeds = {"INPUT0": a, "INPUT1": a}
            config = python_config(dims)
            context = Context(config.name, "1", str(repo), config.to_triton_dict(), "bench")
            handler = find_class(load_module(repo / config.name / "1" / "model.py"), "")()
            runner = make_runner(handler, context)
            worker = PythonBackend(repo / config.name / "1" / "model.py", config, InstanceSpec())
            onnx = OnnxRuntimeBackend(
                repo / f"add_sub_{dims}" / "1" / "model.onnx",
                engine.model_config(f"add_sub_{dims}"),
                InstanceSpec(),
            )
            closers += [worker.close, onnx.close]
            requests = {
                kind: InferenceRequest(
                    name, [Tensor(n, "FP32", a.shape, a) for n in ("INPUT0", "INPUT1")]
                )
                for kind, name in (("onnx", f"add_sub_{dims}"), ("python", config.name))
            }
            cases[dims, "handler in-thread"] = partial(timed, partial(runner.run, feeds, OUTPUTS))
            cases[dims, "handler in worker"] = partial(
                timed, partial(worker.execute, feeds, OUTPUTS)
            )
            cases[dims, "onnx backend"] = partial(timed, partial(onnx.execute, feeds, OUTPUTS))
            for kind, request in requests.items():
                cases[dims, f"engine: {kind}"] = partial(timed_async, engine, request)
        best: dict[tuple[int, str], tuple[float, float]] = {}
        for round_index in range(args.rounds):
            for key, case in cases.items():
                result = case(args.calls)
                samples = await result if asyncio.iscoroutine(result) else result
                assert isinstance(samples, list)
                p50, p99 = np.percentile(samples, [50, 99])
                if key not in best or p50 < best[key][0]:
                    best[key] = (float(p50), float(p99))
            print(f"round {round_index + 1}/{args.rounds} done", flush=True)
    finally:
        for close in closers:
            close()
        await engine.stop()
    report(best)


def report(best: dict[tuple[int, str], tuple[float, float]]) -> None:
    for dims in SIZES:
        print(f"\nadd_sub FP32 [1, {dims}] ({dims * 4 / 1024:g} KiB per input), µs per request")
        print(f"  {'case':22} {'p50':>10} {'p99':>10}")
        for (size, name), (p50, p99) in best.items():
            if size == dims:
                print(f"  {name:22} {p50:10.1f} {p99:10.1f}")
        thread, worker = best[dims, "handler in-thread"][0], best[dims, "handler in worker"][0]
        onnx, python = best[dims, "engine: onnx"][0], best[dims, "engine: python"][0]
        hop = worker - thread
        print(f"  worker process hop: +{hop:.1f} µs ({worker / thread:.1f}x the handler alone)")
        print(f"  engine python / engine onnx: {python / onnx:.2f}x (+{python - onnx:.1f} µs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    parser.add_argument("--calls", type=int, default=400, help="requests per case and round")
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 1, 50
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
