"""``inferplex bench --scenario``: MLPerf LoadGen (``mlperf_loadgen``) driving one model.

LoadGen decides when each sample is issued and times it; the bench only sends the samples
(:mod:`.mlperf_sut`, with the bench's own clients) and prints what LoadGen wrote in its summary
(:mod:`.mlperf_summary`), adding what LoadGen cannot know: the failed responses and the
client's CPU time.

- ``singlestream``: one sample at a time, the next when the last completed; LoadGen reports
  the 90th percentile latency.
- ``server``: samples at Poisson-distributed times at ``--target-qps``; VALID when the p99
  latency is within ``--latency-bound-ms`` (and the run long enough for LoadGen's early
  stopping). ``--find-peak`` searches the highest VALID QPS (:mod:`.mlperf_peak`).
- ``offline``: every sample in one query at the start; LoadGen reports samples per second.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.clients import InferClient
from inferplex_tools.benchtool.compat import CompatLog
from inferplex_tools.benchtool.control import server_api
from inferplex_tools.benchtool.mlperf_peak import find_peak
from inferplex_tools.benchtool.mlperf_sut import LoopThread, RunResult, run_loadgen
from inferplex_tools.benchtool.sweep import BenchOptions, _prepare, split_address

#: the ``--scenario`` values and LoadGen's names for them
SCENARIOS = {"singlestream": "SingleStream", "server": "Server", "offline": "Offline"}
#: Server: the latency percentile the bound applies to (MLPerf's for most Server benchmarks)
SERVER_PERCENTILE = 0.99
#: figures LoadGen gives in nanoseconds, printed in ms in this order after the percentiles' min
_LATENCY_KEYS = ("Min latency (ns)", "Mean latency (ns)")

Echo = Callable[[str], None]


@dataclass
class MlperfOptions:
    """The LoadGen side of a run (the ``--scenario`` flags)."""

    scenario: str
    target_qps: float = 100.0
    """Server: the QPS LoadGen schedules (the start of --find-peak); Offline: the expected QPS
    from which LoadGen sizes its one query"""
    latency_bound_ms: float = 10.0
    expected_latency_ms: float = 0.1
    """SingleStream: LoadGen pre-generates queries for --min-duration-ms at this latency, so it
    must not be above the real one (or LoadGen runs out of queries before the duration)"""
    min_duration_ms: int = 10_000
    min_query_count: int = 100
    find_peak: bool = False
    peak_tolerance: float = 0.05
    peak_max_probes: int = 12
    max_in_flight: int = 64
    log_dir: Path | None = None

    def check(self) -> None:
        """BenchError naming the first flag with a bad value."""
        if self.scenario not in SCENARIOS:
            raise BenchError(f"--scenario: expected one of {', '.join(SCENARIOS)}")
        if min(self.target_qps, self.latency_bound_ms, self.expected_latency_ms) <= 0:
            raise BenchError(
                "--target-qps, --latency-bound-ms and --expected-latency-ms must be > 0"
            )
        if self.min_duration_ms < 0 or self.min_query_count < 1:
            raise BenchError("--min-duration-ms must be >= 0 and --min-query-count >= 1")
        if self.max_in_flight < 1:
            raise BenchError("--max-in-flight must be >= 1")
        if self.find_peak and self.scenario != "server":
            raise BenchError("--find-peak searches a Server QPS: use it with --scenario server")
        if self.peak_tolerance <= 0 or self.peak_max_probes < 1:
            raise BenchError("--peak-tolerance must be > 0 and --peak-max-probes >= 1")


def loadgen() -> Any:
    """The ``mlperf_loadgen`` module; BenchError saying how to install it when missing."""
    try:
        import mlperf_loadgen
    except ImportError:
        raise BenchError(
            "--scenario needs MLPerf LoadGen: pip install 'inferplex[bench]' (or mlcommons-loadgen)"
        ) from None
    return mlperf_loadgen


def loadgen_settings(lg: Any, options: MlperfOptions, qps: float) -> Any:
    """LoadGen's TestSettings for a performance run of ``options.scenario`` at ``qps``."""
    settings = lg.TestSettings()
    settings.scenario = getattr(lg.TestScenario, SCENARIOS[options.scenario])
    settings.mode = lg.TestMode.PerformanceOnly
    settings.min_duration_ms = options.min_duration_ms
    settings.min_query_count = options.min_query_count
    if options.scenario == "server":
        settings.server_target_qps = qps
        settings.server_target_latency_ns = int(options.latency_bound_ms * 1e6)
        settings.server_target_latency_percentile = SERVER_PERCENTILE
    elif options.scenario == "offline":
        settings.offline_expected_qps = qps
    else:
        settings.single_stream_expected_latency_ns = int(options.expected_latency_ms * 1e6)
    return settings


def run_mlperf(bench: BenchOptions, options: MlperfOptions, echo: Echo) -> int:
    """Run the scenario (or the peak search) against ``bench.url``'s first model; print every
    result. Returns the exit code: 0 VALID, 1 INVALID (or no VALID peak)."""
    options.check()
    bench.check()
    if len(bench.models) != 1:
        raise BenchError("--scenario drives one model: give exactly one --model")
    lg = loadgen()
    host, port = split_address(bench.url)
    model = bench.models[0]
    label = f"{SCENARIOS[options.scenario]} {model} {bench.protocol_label}"
    api = server_api(bench.protocol, f"{host}:{port}", CompatLog())
    with LoopThread() as loop:
        try:
            api.server_metadata()  # an unreachable server is a BenchError (exit 2) here
            try:
                prepared = loop.run(_prepare(api, bench, host, port, model, CompatLog()))
            except BenchError as exc:
                echo(f"{label}: INVALID: the probe request failed, LoadGen not started: {exc}")
                return 1
            log_dir = options.log_dir or Path(tempfile.mkdtemp(prefix="inferplex-mlperf-"))
            try:
                if options.find_peak:
                    return _peak(lg, loop, prepared.client, options, log_dir, label, echo)
                result = run_loadgen(
                    lg,
                    loop,
                    prepared.client,
                    loadgen_settings(lg, options, options.target_qps),
                    log_dir,
                    options.max_in_flight,
                )
                echo(f"{label}{_target(options, options.target_qps)}")
                for line in format_result(result):
                    echo(f"  {line}")
                return 0 if result.valid else 1
            finally:
                loop.run(prepared.client.close())
        finally:
            api.close()


def _peak(
    lg: Any,
    loop: LoopThread,
    client: InferClient,
    options: MlperfOptions,
    log_dir: Path,
    label: str,
    echo: Echo,
) -> int:
    """Bracket and bisect Server QPS; print each probe as it ends, then the peak's result."""
    results: dict[float, RunResult] = {}
    echo(
        f"find-peak {label}: p99 bound {options.latency_bound_ms:g} ms, probes of "
        f">= {options.min_duration_ms} ms and >= {options.min_query_count} queries"
    )

    def probe(qps: float) -> bool:
        folder = log_dir / f"probe-{len(results) + 1:02d}-{qps:.1f}qps"
        settings = loadgen_settings(lg, options, qps)
        result = run_loadgen(lg, loop, client, settings, folder, options.max_in_flight)
        results[qps] = result
        echo(f"  probe {len(results)}: {qps:.1f} QPS {_verdict(result)}; {_brief(result)}")
        return result.valid

    search = find_peak(
        probe,
        options.target_qps,
        tolerance=options.peak_tolerance,
        max_probes=options.peak_max_probes,
    )
    if search.peak is None:
        lowest = min(p.qps for p in search.probes)
        echo(
            f"no VALID QPS in {len(search.probes)} probes, down to {lowest:.1f} QPS "
            f"(logs under {log_dir})"
        )
        return 1
    echo(f"peak: {search.peak:.1f} QPS, the highest VALID probe; its result:")
    for line in format_result(results[search.peak]):
        echo(f"  {line}")
    return 0


def _target(options: MlperfOptions, qps: float) -> str:
    if options.scenario == "server":
        return f" at {qps:g} QPS, p99 bound {options.latency_bound_ms:g} ms"
    if options.scenario == "offline":
        return f", expected {qps:g} QPS"
    return ""


def _verdict(result: RunResult) -> str:
    """VALID, or INVALID with why: LoadGen's unmet constraints and the failed responses."""
    if result.valid:
        return "VALID"
    reasons = [f"{name} not satisfied" for name in result.summary.unmet]
    if result.errors:
        reasons.append(f"{result.errors} failed responses")
    return f"INVALID ({'; '.join(reasons)})" if reasons else "INVALID"


def _brief(result: RunResult) -> str:
    """A probe's line: LoadGen's throughput and p99, and the client's CPU."""
    summary = result.summary
    p99 = summary.percentiles_ns.get(99.0)
    parts = [f"completed {summary.completed_qps:g}/s" if summary.completed_qps else ""]
    parts.append(f"p99 {p99 / 1e6:.3f} ms" if p99 is not None else "")
    parts.append(_cpu(result))
    return ", ".join(p for p in parts if p)


def _cpu(result: RunResult) -> str:
    cores = result.cpu_seconds / result.wall_seconds if result.wall_seconds else 0.0
    return (
        f"client CPU {result.cpu_seconds:.2f} s in {result.wall_seconds:.2f} s ({cores:.2f} cores)"
    )


def format_result(result: RunResult) -> list[str]:
    """The lines of one run: LoadGen's verdict and figures, the errors, the client CPU."""
    summary = result.summary
    lines = [f"result: {_verdict(result)}"]
    rates = [f"{k} {v:g}" for k, v in summary.metrics.items() if "(ns)" not in k]
    if rates:
        lines.append("LoadGen: " + ", ".join(rates))
    latency = [
        f"{key.split()[0].lower()} {summary.metrics[key] / 1e6:.3f}"
        for key in _LATENCY_KEYS
        if key in summary.metrics
    ]
    latency += [f"p{p:g} {ns / 1e6:.3f}" for p, ns in sorted(summary.percentiles_ns.items())]
    if "Max latency (ns)" in summary.metrics:
        latency.append(f"max {summary.metrics['Max latency (ns)'] / 1e6:.3f}")
    lines.append("latency ms: " + ", ".join(latency))
    if not summary.valid:
        lines += [f"LoadGen: {note}" for note in summary.notes]
    if result.errors:
        lines.append(
            f"errors: {result.errors} failed responses (completed to LoadGen empty); "
            f"first: {result.first_error}"
        )
    lines.append(_cpu(result))
    lines.append(f"LoadGen log: {result.log_dir}")
    return lines
