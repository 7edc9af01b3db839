"""The ``inferplex bench`` command: flags -> :class:`BenchOptions` -> a run -> outputs.

Kept free of heavy imports at module level: ``inferplex serve`` imports the CLI too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.flags import ports_option
from inferplex_tools.benchtool.mlperf_cli import run_scenario, scenario_options

#: exit codes: a regression (or a failed model) is 1, bad options or an unusable server 2
EXIT_REGRESSION = 1
EXIT_ERROR = 2


def _numbers(kind: type, flag: str) -> Any:
    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> list[Any]:
        if not value:
            return []
        try:
            return [kind(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise click.BadParameter(
                f"expected comma-separated numbers, e.g. {flag} 1,4,16"
            ) from None

    return convert


def _names(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    return [name for item in value for name in item.split(",") if name.strip()]


@click.command()
@click.option(
    "--url",
    default="127.0.0.1:8000",
    show_default=True,
    help="Server HOST:PORT (HTTP or gRPC port).",
)
@click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True)
@click.option(
    "--model",
    "models",
    multiple=True,
    callback=_names,
    help="Model(s) to drive; repeat or comma-separate.",
)
@click.option(
    "--model-version", default="", help="Version to address (default: the server's choice)."
)
@click.option("--binary/--json", default=True, show_default=True, help="HTTP tensor encoding.")
@click.option(
    "--concurrency",
    callback=_numbers(int, "--concurrency"),
    help="Closed-loop clients per level, e.g. 1,4,16.",
)
@click.option(
    "--rate",
    callback=_numbers(float, "--rate"),
    help="Open-loop requests/s per level, e.g. 100,500.",
)
@click.option(
    "--batch-size",
    type=int,
    default=1,
    show_default=True,
    help="Rows per request (batching models).",
)
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help="Full shape of an input, NAME:d0,d1,... (variable dims).",
)
@click.option(
    "--warmup",
    type=float,
    default=1.0,
    show_default=True,
    help="Seconds of unmeasured load per level.",
)
@click.option(
    "--window", type=float, default=2.0, show_default=True, help="Seconds per measurement window."
)
@click.option(
    "--stability",
    type=float,
    default=0.1,
    show_default=True,
    help="Stable when the last windows agree within this fraction.",
)
@click.option(
    "--stable-windows", type=int, default=3, show_default=True, help="Windows that must agree."
)
@click.option(
    "--max-windows",
    type=int,
    default=10,
    show_default=True,
    help="Windows before giving up on stability.",
)
@click.option("--together", is_flag=True, help="Load every model at once at each level.")
@click.option(
    "--json-out",
    type=click.Path(path_type=Path),
    help="Write every figure as JSON (a --compare baseline).",
)
@click.option("--csv-out", type=click.Path(path_type=Path), help="Write one CSV row per case.")
@click.option("--plot", type=click.Path(path_type=Path), help="Write a latency-vs-throughput PNG.")
@click.option(
    "--compare",
    "baseline",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Baseline JSON to gate against.",
)
@click.option(
    "--threshold",
    type=float,
    default=5.0,
    show_default=True,
    help="Percent a figure may move before it is flagged.",
)
@click.option(
    "--compat-out",
    type=click.Path(path_type=Path),
    help="Write the compatibility report (default with --compare: bench-compat.json).",
)
@click.option(
    "--record-metrics",
    type=click.Path(path_type=Path),
    help="Record /metrics scrapes to this JSONL (for `inferplex heatmap`).",
)
@click.option("--metrics-url", help="Metrics HOST:PORT to record (default: the launched server's).")
@click.option(
    "--record-interval", type=float, default=1.0, show_default=True, help="Seconds between scrapes."
)
@click.option(
    "--model-repository",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Launch `inferplex serve` on this repository instead of --url.",
)
@click.option(
    "--policies",
    callback=_names,
    multiple=True,
    help="With --model-repository: scheduling policies to A/B, e.g. round_robin,priority.",
)
@click.option(
    "--server-arg",
    "server_args",
    multiple=True,
    help="Extra `inferplex serve` flag for launched servers (repeat).",
)
@ports_option
@click.option(
    "--gate-version",
    default="",
    help="Version gate: benchmark this version against the serving one.",
)
@click.option(
    "--serving-version",
    default="",
    help="Version gate: the version to compare with (default: highest other).",
)
@click.option(
    "--gate-watch",
    is_flag=True,
    help="Version gate: poll the served versions and gate each new one as it loads.",
)
@click.option(
    "--gate-watch-count",
    type=int,
    default=0,
    help="With --gate-watch: stop after this many gates (0 = run until interrupted).",
)
@click.option(
    "--poll-interval",
    type=float,
    default=5.0,
    show_default=True,
    help="With --gate-watch: seconds between polls of the model's versions.",
)
@click.option(
    "--gate-rounds",
    type=int,
    default=2,
    show_default=True,
    help="Version gate: alternating rounds per version (each case keeps its best).",
)
@click.option(
    "--promote/--no-promote",
    default=True,
    show_default=True,
    help="Version gate: promote a passing version.",
)
@scenario_options
def bench(**flags: Any) -> None:
    """Drive a KServe V2 server with load and report throughput and latency.

    Closed-loop concurrency sweeps (--concurrency) and open-loop rate sweeps (--rate), over
    HTTP (binary or JSON) or gRPC, inputs synthesised from the model metadata; or MLPerf
    LoadGen's scenarios (--scenario). Exit code 1 on a regression against --compare (or a
    model that failed, or an INVALID LoadGen run), 2 on bad options.
    """
    try:
        code = _bench(flags)
    except BenchError as exc:
        click.echo(f"error: {exc}", err=True)
        code = EXIT_ERROR
    sys.exit(code)


def _bench(flags: dict[str, Any]) -> int:
    import uvloop

    from inferplex_tools.benchtool.payloads import parse_shapes
    from inferplex_tools.benchtool.sweep import BenchOptions

    if not flags["models"]:
        raise BenchError("--model: give at least one model to benchmark")
    options = BenchOptions(
        url=flags["url"],
        models=flags["models"],
        protocol=flags["protocol"],
        binary=flags["binary"],
        version=flags["model_version"],
        concurrency=flags["concurrency"],
        rates=flags["rate"],
        batch_size=flags["batch_size"],
        shapes=parse_shapes(flags["shapes"]),
        warmup=flags["warmup"],
        window=flags["window"],
        stability=flags["stability"],
        max_windows=flags["max_windows"],
        stable_count=flags["stable_windows"],
        together=flags["together"],
    )
    options.check()
    if flags["ports"] and not flags["model_repository"]:
        raise BenchError("--ports: only for a server the bench launches (--model-repository)")
    if flags["scenario"]:
        return run_scenario(options, flags)
    if flags["record_metrics"]:
        if not (flags["metrics_url"] or flags["model_repository"]):
            raise BenchError("--record-metrics needs --metrics-url HOST:PORT (the metrics port)")
        flags["record_metrics"].write_text("")
    if flags["gate_version"] or flags["gate_watch"]:
        return uvloop.run(_gate(options, flags))
    if flags["model_repository"]:
        return uvloop.run(_launched(options, flags))
    if flags["policies"]:
        raise BenchError("--policies needs --model-repository (the bench launches each server)")
    with _recording(flags, flags["metrics_url"]):
        report = uvloop.run(_run(options))
    return _finish_run(report, flags, "")


def _say(line: str) -> None:
    click.echo(line, err=True)


def _bar(label: str) -> Any:
    from inferplex_tools.benchtool.progress import Progress

    return Progress(0, label)


async def _run(options: Any) -> Any:
    from inferplex_tools.benchtool.sweep import run

    return await run(options, _bar("bench"), _say)


def _recording(flags: dict[str, Any], metrics_url: str | None) -> Any:
    from contextlib import nullcontext

    from inferplex_tools.benchtool.recorder import MetricsRecorder

    path = flags["record_metrics"]
    if path is None:
        return nullcontext()
    if not metrics_url:
        raise BenchError("--record-metrics needs --metrics-url HOST:PORT (the metrics port)")
    return MetricsRecorder(metrics_url, path, flags["record_interval"])


async def _launched(options: Any, flags: dict[str, Any]) -> int:
    """Launch a server per policy (one server with its default policy when none given)."""
    import dataclasses

    from inferplex_tools.benchtool.launch import launch
    from inferplex_tools.benchtool.policies import run_policies, side_by_side
    from inferplex_tools.benchtool.sweep import run

    repository, server_args = flags["model_repository"], list(flags["server_args"])
    policies = flags["policies"]
    if not policies:
        with launch(repository, server_args, ports=flags["ports"]) as server:
            run_options = dataclasses.replace(options, url=server.address(options.protocol))
            with _recording(flags, server.metrics):
                report = await run(run_options, _bar("bench"), _say)
        return _finish_run(report, flags, "")
    reports = await run_policies(
        repository,
        policies,
        options,
        server_args,
        _bar,
        _say,
        around=lambda server: _recording(flags, server.metrics),
        ports=flags["ports"],
    )
    code = 0
    for policy, report in reports.items():
        click.echo(f"\n== scheduling policy {policy}")
        code = max(code, _finish_run(report, flags, policy))
    click.echo("\nside by side (ratio: req/s relative to the first policy)")
    click.echo(side_by_side(reports))
    if flags["json_out"]:
        document = {"policies": {p: r.to_dict() for p, r in reports.items()}}
        flags["json_out"].write_text(json.dumps(document, indent=2) + "\n")
    return code


def _finish_run(report: Any, flags: dict[str, Any], tag: str) -> int:
    """Print and write a run's outputs; compare with the baseline. Returns the exit code."""
    from inferplex_tools.benchtool.compat import format_report
    from inferplex_tools.benchtool.output import table, write_csv

    click.echo(table(report.results))
    click.echo(format_report(report.compat))
    if flags["json_out"] and not tag:
        report.write(flags["json_out"])
    if flags["csv_out"]:
        write_csv(report.results, _tagged(flags["csv_out"], tag))
    if flags["plot"]:
        from inferplex_tools.benchtool.plot import plot

        plot(report.results, _tagged(flags["plot"], tag), f"inferplex bench {tag}".strip())
    code = EXIT_REGRESSION if any(report.compat["models"][k] for k in ("partly", "failed")) else 0
    compat_out = flags["compat_out"]
    if flags["baseline"]:
        from inferplex_tools.benchtool.compare import compare
        from inferplex_tools.benchtool.results import BenchReport

        comparison = compare(BenchReport.read(flags["baseline"]), report, flags["threshold"])
        click.echo(comparison.format())
        compat_out = compat_out or Path("bench-compat.json")
        if not comparison.passed:
            code = EXIT_REGRESSION
        document: dict[str, Any] = {"compat": report.compat, "comparison": comparison.to_dict()}
    else:
        document = {"compat": report.compat}
    if compat_out:
        _tagged(compat_out, tag).write_text(json.dumps(document, indent=2) + "\n")
    return code


def _tagged(path: Path, tag: str) -> Path:
    """``plot.png`` -> ``plot-priority.png`` for the runs of an A/B."""
    return path.with_name(f"{path.stem}-{tag}{path.suffix}") if tag else path


async def _gate(options: Any, flags: dict[str, Any]) -> int:
    """``--gate-version V`` once, or ``--gate-watch``: every new version as it appears."""
    from inferplex_tools.benchtool.gate import version_gate, watch

    if flags["model_repository"] or flags["policies"]:
        raise BenchError(
            "the version gate works against a running server (--url), not a launched one"
        )
    with _recording(flags, flags["metrics_url"]):
        if flags["gate_watch"]:
            results = await watch(
                options,
                flags["threshold"],
                flags["promote"],
                flags["gate_rounds"],
                flags["poll_interval"],
                flags["gate_watch_count"],
                _bar,
                _say,
            )
        else:
            results = [
                await version_gate(
                    options,
                    flags["gate_version"],
                    flags["serving_version"],
                    flags["threshold"],
                    flags["promote"],
                    flags["gate_rounds"],
                    _bar,
                    _say,
                )
            ]
    for result in results:
        _print_gate(result)
    if flags["json_out"]:
        documents = [
            {
                "model": r.model,
                "serving": r.serving_report.to_dict(),
                "candidate": r.candidate_report.to_dict(),
                "comparison": r.comparison.to_dict(),
                "promoted": r.promoted,
                "note": r.note,
            }
            for r in results
        ]
        document = documents if flags["gate_watch"] else documents[0]
        flags["json_out"].write_text(json.dumps(document, indent=2) + "\n")
    return 0 if all(r.ok for r in results) else EXIT_REGRESSION


def _print_gate(result: Any) -> None:
    from inferplex_tools.benchtool.output import table

    click.echo(f"serving version {result.serving}")
    click.echo(table(result.serving_report.results))
    click.echo(f"candidate version {result.candidate}")
    click.echo(table(result.candidate_report.results))
    click.echo(result.comparison.format())
    click.echo(result.note)
