"""The ``--scenario`` flags of ``inferplex bench`` and their dispatch to :mod:`.mlperf`.

Kept apart from :mod:`.command` so the MLPerf flags are declared in one place; this module
imports only click (``inferplex serve`` imports the CLI too), LoadGen only when a scenario runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from inferplex_tools.benchtool import BenchError

#: bench flags that configure the bench's own load or outputs, meaningless under LoadGen
_NOT_WITH_SCENARIO = (
    "concurrency",
    "rate",
    "together",
    "json_out",
    "csv_out",
    "plot",
    "baseline",
    "compat_out",
    "record_metrics",
    "policies",
    "gate_version",
    "gate_watch",
)

_OPTIONS = [
    click.option(
        "--scenario",
        type=click.Choice(["singlestream", "server", "offline"]),
        help="Drive one model with MLPerf LoadGen in this scenario (docs/benchtool.md).",
    ),
    click.option(
        "--target-qps",
        type=float,
        default=100.0,
        show_default=True,
        help="Server: Poisson arrival rate (the start of --find-peak); Offline: expected QPS.",
    ),
    click.option(
        "--latency-bound-ms",
        type=float,
        default=10.0,
        show_default=True,
        help="Server: the p99 latency bound of a VALID run.",
    ),
    click.option(
        "--expected-latency-ms",
        type=float,
        default=0.1,
        show_default=True,
        help="SingleStream: LoadGen's expected latency (sizes its pre-generated queries).",
    ),
    click.option(
        "--find-peak",
        is_flag=True,
        help="Server: search the highest QPS LoadGen reports VALID.",
    ),
    click.option(
        "--peak-tolerance",
        type=float,
        default=0.05,
        show_default=True,
        help="--find-peak: stop when the VALID and INVALID QPS are this fraction apart.",
    ),
    click.option(
        "--peak-max-probes",
        type=int,
        default=12,
        show_default=True,
        help="--find-peak: LoadGen runs at most.",
    ),
    click.option(
        "--min-duration-ms",
        type=int,
        default=10_000,
        show_default=True,
        help="LoadGen's minimum run duration (each probe's with --find-peak).",
    ),
    click.option(
        "--min-query-count",
        type=int,
        default=100,
        show_default=True,
        help="LoadGen's minimum query count.",
    ),
    click.option(
        "--max-in-flight",
        type=int,
        default=64,
        show_default=True,
        help="Scenario runs: requests in flight at most; more samples wait in the client.",
    ),
    click.option(
        "--mlperf-log-dir",
        type=click.Path(path_type=Path, file_okay=False),
        help="Where LoadGen writes its logs (default: a new temporary folder, kept).",
    ),
]


def scenario_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the ``--scenario`` flags to a click command."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def run_scenario(bench: Any, flags: dict[str, Any]) -> int:
    """Run ``flags['scenario']`` with ``bench`` (BenchOptions) against ``--url``, or against a
    server launched on ``--model-repository``; returns the exit code."""
    import dataclasses

    from inferplex_tools.benchtool.mlperf import MlperfOptions, run_mlperf

    clashing = [f"--{name.replace('_', '-')}" for name in _NOT_WITH_SCENARIO if flags[name]]
    if clashing:
        raise BenchError(f"--scenario runs LoadGen's load: drop {', '.join(clashing)}")
    options = MlperfOptions(
        scenario=flags["scenario"],
        target_qps=flags["target_qps"],
        latency_bound_ms=flags["latency_bound_ms"],
        expected_latency_ms=flags["expected_latency_ms"],
        min_duration_ms=flags["min_duration_ms"],
        min_query_count=flags["min_query_count"],
        find_peak=flags["find_peak"],
        peak_tolerance=flags["peak_tolerance"],
        peak_max_probes=flags["peak_max_probes"],
        max_in_flight=flags["max_in_flight"],
        log_dir=flags["mlperf_log_dir"],
    )
    options.check()
    if not flags["model_repository"]:
        return run_mlperf(bench, options, click.echo)
    from inferplex_tools.benchtool.launch import launch

    with launch(
        flags["model_repository"], list(flags["server_args"]), ports=flags["ports"]
    ) as server:
        bench = dataclasses.replace(bench, url=server.address(bench.protocol))
        return run_mlperf(bench, options, click.echo)
