"""Triton's perf_analyzer (2.51, installed by bench/peers/install.sh) driving a V2 server, and
what the server and the client spent on it.

One :func:`measure` is one perf_analyzer run at one concurrency: its figures come from the
CSV it writes (``-f``): the throughput and the p50/p99 latency of its last, stable
measurement window. Around the run, the server's CPU time (user + system of its process and
every descendant: Triton's Python backend stubs, inferplex's worker processes) and the
successful requests its own statistics counted (``/v2/models/{m}/stats``) give the server's
CPU per request; perf_analyzer's own CPU time (this process's reaped children) gives the
client's. Both cover the whole run, warm-up and unstable windows included.
"""

from __future__ import annotations

import csv
import json
import resource
import subprocess
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bench.isolation import tree_cpu
from bench.peers.triton import INSTALL, PEERS
from inferplex_tools.benchtool import BenchError

#: the wrapper install.sh writes (it sets the library paths the binary needs)
BINARY = PEERS / "bin" / "perf_analyzer"
#: perf_analyzer's CSV columns for the figures read, latencies in µs
RATE, P50, P99 = "Inferences/Second", "p50 latency", "p99 latency"
#: what perf_analyzer says when no three consecutive windows agreed within the stability
UNSTABLE = "Failed to obtain stable measurement"
#: runs of one measurement at most, each with windows twice as long as the last
ATTEMPTS = 3


class Unstable(BenchError):
    """perf_analyzer found no three consecutive windows that agreed."""


@dataclass(frozen=True)
class Settings:
    """How long perf_analyzer measures: windows of ``window_ms`` until the last three agree
    within ``stability`` percent, at most ``max_trials`` windows."""

    window_ms: int = 2500
    stability: int = 25
    max_trials: int = 8
    timeout: float = 180.0

    def options(self) -> list[str]:
        return [
            "--measurement-interval", str(self.window_ms),
            "--stability-percentage", str(self.stability),
            "--max-trials", str(self.max_trials),
        ]  # fmt: skip


#: a smoke run: three short windows, taken whatever their spread
QUICK = Settings(window_ms=500, stability=100, max_trials=3, timeout=60.0)


@dataclass(frozen=True)
class Server:
    """A server under test: its name, the process whose tree's CPU time is its cost, and its
    addresses (host:port)."""

    name: str
    pid: int
    http: str
    grpc: str

    def address(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http


@dataclass(frozen=True)
class Figures:
    """One run: inferences/s, latency percentiles, and CPU µs per request of each side."""

    rate: float
    p50_ms: float
    p99_ms: float
    server_cpu_us: float
    client_cpu_us: float


def missing(binary: Path = BINARY) -> str | None:
    """Why perf_analyzer cannot run here, or None."""
    try:
        check = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return f"perf_analyzer is not installed at {binary}: run {INSTALL}"
    if check.returncode != 0:
        return f"perf_analyzer cannot start: {(check.stdout + check.stderr).strip()[-300:]}"
    return None


def command(
    binary: Path,
    model: str,
    address: str,
    protocol: str,
    concurrency: int,
    settings: Settings,
    csv_path: Path,
    options: Sequence[str] = (),
) -> list[str]:
    """perf_analyzer's command line for one run, batch-1 requests of zeros (random bits would
    be NaN and Inf to the models), with the extra ``options``."""
    return [
        str(binary), "-m", model, "-u", address, "-i", protocol,
        "--concurrency-range", str(concurrency), "--input-data", "zero",
        *settings.options(), *options, "-f", str(csv_path),
    ]  # fmt: skip


def parse_csv(text: str) -> tuple[float, float, float]:
    """Inferences/s, p50 and p99 in ms of the first row of perf_analyzer's CSV (``-f``)."""
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or any(not rows[0].get(column) for column in (RATE, P50, P99)):
        raise BenchError(f"perf_analyzer's CSV has no {RATE}, {P50} and {P99}:\n{text[:500]}")
    row = rows[0]
    return float(row[RATE]), float(row[P50]) / 1e3, float(row[P99]) / 1e3


def count(http: str, model: str, outcome: str = "success") -> int:
    """The requests of ``model`` (all versions) the server counted as ``outcome``: success or
    fail."""
    with urllib.request.urlopen(f"http://{http}/v2/models/{model}/stats", timeout=30) as response:
        stats = json.load(response)["model_stats"]
    return sum(int(entry["inference_stats"][outcome]["count"]) for entry in stats)


def client_cpu() -> float:
    """User + system seconds of this process's finished children (the perf_analyzer runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    server: Server,
    model: str,
    protocol: str,
    concurrency: int,
    settings: Settings,
    options: Sequence[str] = (),
    binary: Path = BINARY,
) -> Figures:
    """One perf_analyzer run on ``server`` with the extra ``options``. A run whose windows
    never agreed (a busy machine) is made again with windows twice as long, up to ATTEMPTS
    runs in all; BenchError with perf_analyzer's output if it fails otherwise."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _measure_once(server, model, protocol, concurrency, settings, options, binary)
        except Unstable:
            if attempt == ATTEMPTS:
                raise
            settings = replace(settings, window_ms=settings.window_ms * 2)
            print(f"    unstable: again with windows of {settings.window_ms} ms", flush=True)
    raise AssertionError("unreachable")


def _measure_once(
    server: Server,
    model: str,
    protocol: str,
    concurrency: int,
    settings: Settings,
    options: Sequence[str],
    binary: Path,
) -> Figures:
    with tempfile.TemporaryDirectory(prefix="inferplex-pa-") as tmp:
        csv_path = Path(tmp) / "run.csv"
        address = server.address(protocol)
        args = command(binary, model, address, protocol, concurrency, settings, csv_path, options)
        cpu, requests, client = tree_cpu(server.pid), count(server.http, model), client_cpu()
        run = subprocess.run(args, capture_output=True, text=True, timeout=settings.timeout)
        cpu = tree_cpu(server.pid) - cpu
        requests = count(server.http, model) - requests
        client = client_cpu() - client
        if run.returncode != 0 or not csv_path.exists():
            output = (run.stdout + run.stderr).strip()
            failure = Unstable if UNSTABLE in output else BenchError
            raise failure(
                f"perf_analyzer failed ({run.returncode}) on {server.name} {model} over "
                f"{protocol} at concurrency {concurrency}:\n{output[-2000:]}"
            )
        rate, p50, p99 = parse_csv(csv_path.read_text())
    per_request = 1e6 / max(requests, 1)
    return Figures(rate, p50, p99, cpu * per_request, client * per_request)
