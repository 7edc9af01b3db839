"""Two models competing for the cores: the scenario that bench/priority.py and bench/slo.py run.

A *steady* model is driven open loop at a modest fixed rate (so its latency is the server's
doing, not queueing behind its own requests) while a *flood* model gets closed-loop clients
enough to saturate the machine. Both are ``modelgen.small_cnn`` at a reduced image size (same
architecture, different seeded weights: the same cost), sent over HTTP binary, one image per
request. Every answer must be 200 and a first and a last answer of each load are compared with
in-process ONNX Runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.loadgen import Measurement
from bench.overhead import Timing, http_load
from bench.serving import (
    Check,
    Layout,
    Served,
    StatsProbe,
    latency_figures,
    open_http_load,
    output_check,
    reference,
    write_model,
)
from examples import modelgen
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.launch import HOST


@dataclass(frozen=True)
class Pair:
    """The two models and how each is driven."""

    steady: str
    flood: str
    rate: float
    """requests/s sent to ``steady`` (open loop)"""
    concurrency: int
    """closed-loop clients of ``flood``"""
    image_size: int


def build_models(repo: Path, pair: Pair) -> dict[str, Path]:
    """Both CNNs (seeds 0 and 1); configs are written per setup by :func:`configure`."""
    return {
        name: modelgen.small_cnn(repo, name=name, image_size=pair.image_size, seed=seed)
        for seed, name in enumerate((pair.steady, pair.flood))
    }


def configure(models: dict[str, Path], layouts: dict[str, Layout]) -> None:
    for name, path in models.items():
        write_model(path, layouts[name])


class Contention:
    """The three measurements of one server: the steady model alone, both at once, and the
    flood model alone (a burst while the other is idle)."""

    def __init__(self, served: Served, models: dict[str, Path], pair: Pair) -> None:
        self._served = served
        self._pair = pair
        size = pair.image_size
        self._requests: dict[str, bytes] = {}
        self._checks: dict[str, Check] = {}
        for seed, name in enumerate((pair.steady, pair.flood)):
            image = np.random.default_rng(seed).random((1, 3, size, size), dtype=np.float32)
            expected = reference(models[name], {"image": image})
            self._requests[name] = arrays.http_binary_request(
                HOST, name, {"image": image}, list(expected)
            )
            self._checks[name] = output_check(expected, f"{name} over http-binary")

    def _steady(self, timing: Timing) -> Awaitable[Measurement]:
        name = self._pair.steady
        port = self._served.server.http_port
        return open_http_load(
            port, self._requests[name], self._pair.rate, self._checks[name], timing
        )

    def _flood(self, timing: Timing, probe: StatsProbe) -> Awaitable[Measurement]:
        name = self._pair.flood
        port = self._served.server.http_port
        return http_load(
            port, self._requests[name], self._pair.concurrency, self._checks[name], probe, timing
        )

    async def alone(self, timing: Timing) -> dict[str, Any]:
        """The steady model with nothing else running."""
        return {"steady": latency_figures(await self._steady(timing))}

    async def flooded(self, timing: Timing) -> dict[str, Any]:
        """The steady model while the flood model saturates the server (same window)."""
        probe = StatsProbe(self._served, [self._pair.steady, self._pair.flood])
        steady, flood = await asyncio.gather(self._steady(timing), self._flood(timing, probe))
        return {
            "steady": latency_figures(steady),
            "flood": latency_figures(flood),
            **cpu_cores(flood),
            "stats": probe.window(),
        }

    async def burst(self, timing: Timing) -> dict[str, Any]:
        """The flood model alone: how much of the machine one busy model can use."""
        probe = StatsProbe(self._served, [self._pair.flood])
        flood = await self._flood(timing, probe)
        return {"flood": latency_figures(flood), **cpu_cores(flood), "stats": probe.window()}


def cpu_cores(measurement: Measurement) -> dict[str, float]:
    """Cores the server and this client process used on average in the window: with the
    machine's core count they show whether anything else competed for the CPUs."""
    return {
        f"{side}_cpu_cores": round((seconds or 0.0) / measurement.seconds, 2)
        for side, seconds in (
            ("server", measurement.server_cpu_seconds),
            ("client", measurement.client_cpu_seconds),
        )
    }
