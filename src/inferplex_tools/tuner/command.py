"""The ``inferplex tune`` command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.flags import ports_option
from inferplex_tools.tuner.decision import MIN_GAIN


def _ints(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int]:
    if not value:
        return []
    try:
        return [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter("expected comma-separated integers, e.g. 1,8,32") from None


def _words(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


@click.command()
@click.option(
    "--model-repository",
    required=True,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
)
@click.option(
    "--model",
    "models",
    required=True,
    multiple=True,
    help="Model(s) to tune (folders of the repository); several are tuned together.",
)
@click.option(
    "--max-batch-size", callback=_ints, help="Values to try, e.g. 1,8,32 (default: the model's)."
)
@click.option(
    "--queue-delay-us",
    callback=_ints,
    default="0",
    show_default=True,
    help="max_queue_delay_microseconds values.",
)
@click.option(
    "--instances", callback=_ints, default="1", show_default=True, help="Instance counts."
)
@click.option(
    "--threads",
    callback=_ints,
    default="1",
    show_default=True,
    help="Intra-op threads per instance.",
)
@click.option(
    "--precision",
    callback=_words,
    default="fp32",
    show_default=True,
    help="fp32 and/or int8 (via inferplex optimize).",
)
@click.option("--protocol", type=click.Choice(["http", "grpc"]), default="http", show_default=True)
@click.option(
    "--concurrency",
    type=int,
    default=8,
    show_default=True,
    help="Closed-loop clients per model while measuring.",
)
@click.option("--batch-size", type=int, default=1, show_default=True, help="Rows per request.")
@click.option(
    "--latency-target-ms", type=float, help="Best = highest throughput with p99 within this."
)
@click.option(
    "--warmup", type=float, default=0.5, show_default=True, help="Seconds before each measurement."
)
@click.option(
    "--window",
    type=float,
    default=1.0,
    show_default=True,
    help="Window seconds at rung 0 (x eta per rung).",
)
@click.option("--windows", type=int, default=3, show_default=True, help="Windows per measurement.")
@click.option(
    "--eta", type=int, default=3, show_default=True, help="Successive halving: keep 1/eta per rung."
)
@click.option(
    "--max-candidates", type=int, default=0, help="Sample at most this many candidates (0 = all)."
)
@click.option(
    "--max-rungs", type=int, default=0, help="Stop after this many rungs (0 = until one is left)."
)
@click.option(
    "--results", type=click.Path(path_type=Path), help="Resumable JSONL of every measurement."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
@click.option(
    "--server-arg", "server_args", multiple=True, help="Extra `inferplex serve` flag (repeat)."
)
@ports_option
@click.option(
    "--min-gain",
    type=float,
    default=MIN_GAIN,
    show_default=True,
    help="--write replaces the current configuration only when the best one has this much "
    "more throughput (a fraction: 0.1 = 10%), or meets a --latency-target-ms it misses.",
)
@click.option(
    "--write",
    is_flag=True,
    help="Save the best configuration into the model's config file when it beats the current one.",
)
def tune(**flags: Any) -> None:
    """Search max batch size, queue delay, instances, threads and precision for a model, or
    for several models sharing the machine (loaded together; one setting for all).

    Successive halving: every candidate is measured briefly, the best third again for longer,
    and so on. Prints every measurement, the throughput-vs-p99 Pareto frontier and the best
    configuration (under --latency-target-ms); --write saves it.
    """
    try:
        code = _tune(flags)
    except BenchError as exc:
        click.echo(f"error: {exc}", err=True)
        code = 2
    sys.exit(code)


def _tune(flags: dict[str, Any]) -> int:
    import uvloop

    from inferplex_tools.benchtool.progress import Progress
    from inferplex_tools.tuner.runner import TuneOptions, tune
    from inferplex_tools.tuner.space import SearchSpace

    space = SearchSpace(
        max_batch_size=flags["max_batch_size"],
        queue_delay_us=flags["queue_delay_us"],
        instances=flags["instances"],
        threads=flags["threads"],
        precision=flags["precision"],
    )
    options = TuneOptions(
        repository=flags["model_repository"],
        models=[m for item in flags["models"] for m in item.split(",") if m.strip()],
        space=space,
        protocol=flags["protocol"],
        concurrency=flags["concurrency"],
        batch_size=flags["batch_size"],
        warmup=flags["warmup"],
        window=flags["window"],
        windows=flags["windows"],
        eta=flags["eta"],
        max_candidates=flags["max_candidates"],
        max_rungs=flags["max_rungs"],
        latency_target_ms=flags["latency_target_ms"],
        min_gain=flags["min_gain"],
        results=flags["results"],
        seed=flags["seed"],
        server_args=list(flags["server_args"]),
        ports=flags["ports"],
    )
    if options.concurrency < 1 or options.windows < 1 or options.window <= 0:
        raise BenchError("--concurrency and --windows must be >= 1, --window > 0 s")
    if options.min_gain < 0:
        raise BenchError(f"--min-gain: expected a fraction >= 0, got {options.min_gain}")
    result = uvloop.run(tune(options, Progress(0, "tune"), lambda line: click.echo(line, err=True)))
    click.echo(report(result, options.latency_target_ms))
    if result.best is None:
        return 1
    if flags["write"] and result.decision is not None and not result.decision.write:
        click.echo("not written: the current configuration is kept")
    elif flags["write"]:
        from inferplex_tools.tuner.configs import int8_quantizer, write_best

        quantize, _ = int8_quantizer()
        for model in options.models:
            for path in write_best(options.repository / model, result.best.data, quantize):
                click.echo(f"wrote {path}")
    return 0


def report(result: Any, target_ms: float | None) -> str:
    """Every measurement by rung, the Pareto frontier and the best configuration."""
    lines = [f"{len(result.candidates)} candidates, {len(result.rungs)} rungs (successive halving)"]
    lines += [f"note: {note}" for note in result.notes]
    for rung in result.rungs:
        lines.append(f"rung {rung.index}: {len(rung.measured)} measured, kept {len(rung.kept)}")
        lines.append(f"  {'candidate':28} {'req/s':>9} {'p99 ms':>8}")
        ranked = sorted(rung.measured.values(), key=lambda p: -p.throughput)
        kept = {c.key for c in rung.kept}
        for point in ranked:
            mark = " *" if point.key in kept else ""
            lines.append(f"  {point.key:28} {point.throughput:>9.1f} {point.p99_ms:>8.3f}{mark}")
    lines.append("Pareto frontier (throughput vs p99, rung 0: every candidate measured alike):")
    lines += [f"  {p.key:28} {p.throughput:>9.1f} {p.p99_ms:>8.3f}" for p in result.front]
    target = f" with p99 <= {target_ms:g} ms" if target_ms is not None else ""
    if result.best is None:
        lines.append(f"best{target}: none")
    else:
        best = result.best
        c = best.data
        lines.append(
            f"best{target}: {best.key}: {best.throughput:.1f} req/s, p99 {best.p99_ms:.3f} ms "
            f"(max_batch_size {c.max_batch_size}, max_queue_delay_microseconds "
            f"{c.queue_delay_us}, instances {c.instances}, intra_op_thread_count {c.threads}, "
            f"{c.precision})"
        )
    if result.current is not None:
        current = result.current
        lines.append(
            f"current: {current.key}: {current.throughput:.1f} req/s, p99 "
            f"{current.p99_ms:.3f} ms (measured in the same rung)"
        )
    if result.decision is not None:
        verdict = "replace" if result.decision.write else "keep"
        lines.append(f"verdict: {verdict}: {result.decision.reason}")
    return "\n".join(lines)
