"""``inferplex optimize``: the thin CLI over :func:`inferplex_tools.optimize.optimize`.

Exit status: 0 when a new version was written, 3 when no variant was promoted (the report says
why), 2 for bad flags, input files or models."""

from __future__ import annotations

import sys
from pathlib import Path

import click

#: exit status when the run worked but no variant beat the FP32 parent
NOT_PROMOTED = 3


@click.command()
@click.option(
    "--model-repository",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The model repository holding the model.",
)
@click.option("--model", "model", required=True, help="Name of the model to optimise.")
@click.option("--version", "version", type=int, help="Version to start from (default: highest).")
@click.option("--int8", is_flag=True, help="Build an INT8 variant.")
@click.option("--fp16", is_flag=True, help="Build an FP16 variant (usually slower on CPUs).")
@click.option("--graph", is_flag=True, help="Save ONNX Runtime's graph optimisations offline.")
@click.option(
    "--method",
    type=click.Choice(["auto", "dynamic", "static"]),
    default="auto",
    show_default=True,
    help="INT8 method; auto: static for convolution graphs, dynamic for MatMul-heavy ones.",
)
@click.option(
    "--format",
    "static_format",
    type=click.Choice(["qoperator", "qdq"]),
    default="qoperator",
    show_default=True,
    help="Static INT8 graph form: integer operators or QuantizeLinear/DequantizeLinear pairs.",
)
@click.option(
    "--calibration",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Calibration set: .npz with one array per input (rows first).",
)
@click.option(
    "--calibration-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Calibration set: a folder of such .npz files.",
)
@click.option(
    "--eval",
    "evaluation",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Evaluation set: .npz with one array per input and optionally 'labels'.",
)
@click.option(
    "--task",
    type=click.Choice(["auto", "classification", "embedding"]),
    default="auto",
    show_default=True,
    help="Accuracy measure; auto: classification when --eval has labels, else embedding.",
)
@click.option("--output", "output", help="Output compared with FP32 (default: first float one).")
@click.option("--batch-size", type=int, default=32, show_default=True, help="Throughput batch.")
@click.option("--rounds", type=int, default=7, show_default=True, help="Interleaved rounds.")
@click.option("--round-seconds", type=float, default=0.25, show_default=True)
@click.option(
    "--threads",
    type=int,
    default=0,
    help="Intra-op threads of every session timed (0: as many as the server gives the model).",
)
@click.option(
    "--clock",
    type=click.Choice(["wall", "cpu"]),
    default="wall",
    show_default=True,
    help="Time per call: elapsed, or the thread's CPU time (steadier on a shared machine; "
    "needs --threads 1).",
)
@click.option(
    "--min-speedup",
    type=float,
    default=1.0,
    show_default=True,
    help="FP32 time / variant time needed at every batch size measured.",
)
@click.option(
    "--max-accuracy-drop",
    type=float,
    default=0.01,
    show_default=True,
    help="Accuracy points (as a fraction) a classifier with labels may lose.",
)
@click.option("--min-agreement", type=float, default=0.99, show_default=True)
@click.option("--min-cosine", type=float, default=0.98, show_default=True)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also save the report here (default: the new version's folder, or the model's).",
)
def optimize(
    model_repository: Path,
    model: str,
    version: int | None,
    calibration: Path | None,
    calibration_dir: Path | None,
    evaluation: Path | None,
    min_speedup: float,
    max_accuracy_drop: float,
    min_agreement: float,
    min_cosine: float,
    round_seconds: float,
    **flags: object,
) -> None:
    """Turn an ONNX model into a faster new version (INT8, FP16, graph optimisation).

    Each variant is measured against the FP32 parent in one interleaved run (size, latency at
    batch 1, throughput at --batch-size, accuracy on --eval) and written as the next version
    only when it is at least --min-speedup times as fast and accurate enough. Exit status 3:
    nothing promoted.
    """
    from inferplex.errors import InferplexError
    from inferplex_tools.optimize.api import OptimizeOptions
    from inferplex_tools.optimize.api import optimize as run_optimize
    from inferplex_tools.optimize.promotion import Thresholds

    if calibration and calibration_dir:
        raise click.UsageError("give --calibration or --calibration-dir, not both")
    try:
        options = OptimizeOptions(
            calibration=calibration or calibration_dir,
            evaluation=evaluation,
            thresholds=Thresholds(min_speedup, max_accuracy_drop, min_agreement, min_cosine),
            round_s=round_seconds,
            **flags,  # type: ignore[arg-type]
        )
        result = run_optimize(
            model_repository, model, version, options, log=lambda m: click.echo(m, err=True)
        )
    except InferplexError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(2)
    click.echo(result.report.to_text())
    for path in result.report_paths:
        click.echo(f"report: {path}")
    if not result.promoted:
        sys.exit(NOT_PROMOTED)
