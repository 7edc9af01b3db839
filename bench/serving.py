"""What the multi-model benchmarks share (batching, priority, slo).

- :class:`Layout` and :func:`write_model`: how a model is served (batch size, dynamic
  batching, instances, intra-op threads, scheduling), written as its ``config.pbtxt``.
- :func:`serve`: the real server as a subprocess (``inferplex_tools.benchtool.launch``), with its
  CPU clock and its statistics (:class:`Served`); on leaving, every model's failed-request count
  must still be 0, so a server that answers errors cannot look fast.
- :class:`StatsProbe`: the ``server_cpu`` hook of :func:`bench.loadgen.measure`, which is
  called exactly at the two edges of the measured window; it also takes the models'
  statistics there, so batch sizes and close reasons cover the same window as the rates.
- Load cases that check a first and a last answer: closed loop (``bench.overhead``'s
  ``http_load`` / ``grpc_load``) and open loop (:func:`open_http_load`).
- :func:`write_results`: the JSON document, outside the checkout by default
  (:mod:`bench.outputs`: ``--results-dir``, ``$INFERPLEX_BENCH_RESULTS`` or a temporary folder).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil

from bench.loadgen import Measurement, measure_open
from bench.outputs import result_path
from bench.overhead import Timing, inprocess_session
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.clients import HttpPool
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

Check = Callable[[dict[str, np.ndarray]], None]


@dataclass(frozen=True)
class Layout:
    """How one model is served: the parts of its config a benchmark varies."""

    max_batch_size: int = 8
    batching: Mapping[str, Any] | None = field(default_factory=dict)
    """the ``dynamic_batching`` message; None: none in the config (a model with
    ``max_batch_size`` above 1 then gets ``dynamic_batching {}`` from auto-complete, as in
    Triton: each request alone only with auto-complete off or ``max_batch_size`` 0 or 1)"""
    instances: int = 1
    threads: int = 0
    """``intra_op_thread_count`` of each instance; 0: the server's default (cores / instances)"""
    scheduling: Mapping[str, Any] | None = None
    """the ``scheduling`` message (``weight``, ``slo_p99_ms``)"""


def write_model(model_path: Path, layout: Layout) -> dict[str, Any]:
    """Write the config of the model at ``<repo>/<name>/<version>/model.onnx``; returns it."""
    config = modelgen.model_config(
        model_path,
        max_batch_size=layout.max_batch_size,
        instance_kind="KIND_CPU",
        instance_count=layout.instances,
    )
    if layout.batching is not None:
        config["dynamic_batching"] = dict(layout.batching)
    if layout.threads:
        config["parameters"] = {
            "key": "intra_op_thread_count",
            "value": {"string_value": str(layout.threads)},
        }
    if layout.scheduling:
        config["scheduling"] = dict(layout.scheduling)
    write_config(model_path.parent.parent, config)
    return config


def reference(model_path: Path, inputs: arrays.Arrays) -> dict[str, np.ndarray]:
    """The model's outputs for ``inputs`` from in-process ONNX Runtime: the expected answers."""
    session = inprocess_session(model_path, 1)
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))


class Served:
    """A running server under test: its CPU time and its models' statistics."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self._process = psutil.Process(server.process.pid)

    def cpu(self) -> float:
        """User + system seconds of the server process so far."""
        times = self._process.cpu_times()
        return times.user + times.system

    def statistics(self, model: str) -> dict[str, Any]:
        """The model's entry of ``GET /v2/models/{model}/stats``."""
        url = f"http://{self.server.http_url}/v2/models/{model}/stats"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)["model_stats"][0]

    def check_no_failures(self, models: Sequence[str]) -> None:
        """Raise BadResponse if the server counted a failed request of any model."""
        for model in models:
            failed = self.statistics(model)["inference_stats"]["fail"]["count"]
            if failed:
                raise arrays.BadResponse(f"the server failed {failed} requests of {model}")


@contextmanager
def serve(
    repository: Path, log_path: Path, env: Mapping[str, str], models: Sequence[str]
) -> Iterator[Served]:
    """Start the server on ``repository``; stop it on leaving, after checking that none of
    ``models`` failed a request. A non-zero exit prints the end of its log."""
    settings = " ".join(f"{k}={v}" for k, v in env.items())
    print(f"starting the server {settings}".rstrip(), flush=True)
    server = start_server(repository, log_path, env={"INFERPLEX_LOG_LEVEL": "warning", **env})
    served = Served(server)
    try:
        yield served
        served.check_no_failures(models)
    finally:
        code = server.stop()
        if code != 0:
            print(f"server exited with {code}:\n{server.log()[-3000:]}", file=sys.stderr)


class StatsProbe:
    """``server_cpu`` for :func:`bench.loadgen.measure` that also snapshots the statistics of
    ``models`` at each of the window's two edges (the stats request itself costs the server
    well under a millisecond of the window's CPU)."""

    def __init__(self, served: Served, models: Sequence[str]) -> None:
        self._served = served
        self._models = list(models)
        self._edges: list[dict[str, dict[str, Any]]] = []

    def __call__(self) -> float:
        cpu = self._served.cpu()
        self._edges.append({model: self._served.statistics(model) for model in self._models})
        return cpu

    def window(self) -> dict[str, dict[str, Any]]:
        """Per model, what the statistics counted between the last two edges: ``requests``,
        ``failed``, ``executions``, ``inferences`` (rows), ``mean_batch`` (rows per
        execution), ``close_reasons`` and ``queue_ms`` (mean time in the queue)."""
        before, after = self._edges[-2:]
        return {model: _difference(before[model], after[model]) for model in self._models}


def _difference(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    def phase(name: str, part: str) -> int:
        return int(after["inference_stats"][name][part] - before["inference_stats"][name][part])

    executions = after["execution_count"] - before["execution_count"]
    inferences = after["inference_count"] - before["inference_count"]
    queued = phase("queue", "count")
    reasons_before = before.get("batch_close_reasons", {})
    reasons = {
        reason: count - reasons_before.get(reason, 0)
        for reason, count in after.get("batch_close_reasons", {}).items()
        if count - reasons_before.get(reason, 0)
    }
    return {
        "requests": phase("success", "count"),
        "failed": phase("fail", "count"),
        "executions": executions,
        "inferences": inferences,
        "mean_batch": round(inferences / executions, 2) if executions else None,
        "close_reasons": reasons,
        "queue_ms": round(phase("queue", "ns") / queued / 1e6, 3) if queued else None,
    }


def output_check(expected: arrays.Arrays, what: str, atol: float = 1e-3) -> Check:
    """Compares decoded outputs with ``expected``; the tolerance allows for the different
    summation order of a batch."""
    return partial(arrays.check_outputs, expected=expected, what=what, atol=atol)


async def open_http_load(
    port: int, request: bytes, rate: float, check: Check, timing: Timing
) -> Measurement:
    """``request`` at a fixed rate over HTTP (open loop); checks a first and a last answer."""
    pool = HttpPool(HOST, port)
    try:
        check(arrays.decode_http_response(*await pool.send(request)))
        result = await measure_open(
            partial(pool.send, request), rate, timing.duration, timing.warmup
        )
        check(arrays.decode_http_response(*await pool.send(request)))
        return result
    finally:
        await pool.close()


def latency_figures(measurement: Measurement) -> dict[str, Any]:
    """Rate, p50 and p99 of a measurement, rounded for the JSON."""
    return {
        "requests": measurement.requests,
        "rate": round(measurement.rate, 1),
        "p50_ms": round(measurement.percentile_ms(50), 3),
        "p99_ms": round(measurement.percentile_ms(99), 3),
    }


def machine_state() -> dict[str, float]:
    """How busy the machine is before a run: the 1-minute load average, and the cores other
    processes keep busy over one second (this process is idle meanwhile). Printed, with a
    warning when others compete for the CPUs: latencies then say more about the neighbours."""
    busy = psutil.cpu_percent(interval=1.0) * (os.cpu_count() or 1) / 100
    state = {"load_average": round(os.getloadavg()[0], 2), "busy_cores": round(busy, 2)}
    warning = " (other processes compete for the CPUs)" if busy > 0.2 else ""
    print(
        f"before the run: load average {state['load_average']:.2f}, other processes busy on "
        f"{busy:.2f} of {os.cpu_count()} cores{warning}",
        flush=True,
    )
    return state


def write_results(
    name: str,
    document: Mapping[str, Any],
    before: Mapping[str, float],
    folder: Path | None = None,
) -> Path:
    """Write ``<name>-<date>-<time>.json`` with the machine's description into ``folder``
    (a script's ``--results-dir``; None: :func:`bench.outputs.default_dir`)."""
    path = result_path(name, folder)
    machine = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "before": dict(before),
        "load_average_after": round(os.getloadavg()[0], 2),
    }
    # default=str: the options hold paths (--results-dir among them)
    path.write_text(json.dumps({"machine": machine, **document}, indent=2, default=str) + "\n")
    print(f"\nwrote {path}")
    return path
