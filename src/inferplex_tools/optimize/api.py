"""The optimiser's Python API: turn an ONNX model of a repository into a faster new version,
or say, with measurements, why not.

    from inferplex_tools.optimize import OptimizeOptions, optimize

    result = optimize(Path("models"), "digits_cnn", options=OptimizeOptions(
        calibration=Path("calibration.npz"), evaluation=Path("eval.npz")))
    print(result.report.to_text())

Each requested variant (INT8, FP16, graph-optimised) is built in a temporary folder, measured
side by side with the FP32 parent in one run, and checked against the promotion rule; the best
eligible variant (highest throughput at the largest batch measured) is written as the next
version number, with the report next to it. When none is eligible no version is written and the
report, saved in the model's folder, says why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
import onnxruntime as ort

from inferplex.config.model_config import ModelConfig
from inferplex.config.readers import read_model_config
from inferplex.errors import ConfigError, InvalidInputError, ModelNotFoundError
from inferplex.lifecycle.planning import plan_model
from inferplex_tools.optimize import measure
from inferplex_tools.optimize.data import (
    DataSet,
    InputSpec,
    input_specs,
    load_npz,
    load_npz_dir,
    synthetic,
)
from inferplex_tools.optimize.fp16 import convert_fp16
from inferplex_tools.optimize.fp32_layers import SHALLOW_CONVS
from inferplex_tools.optimize.graph import optimize_graph
from inferplex_tools.optimize.promotion import Task, Thresholds, failures, resolve_task
from inferplex_tools.optimize.quantize import (
    StaticFormat,
    choose_method,
    match_annotations,
    preprocess,
    quantize_dynamic_int8,
    quantize_static_int8,
)
from inferplex_tools.optimize.report import REPORT_STEM, CandidateReport, Report

ONNX_FILENAME = "model.onnx"
#: rows of synthetic input made up when no data set is given
SYNTHETIC_ROWS = 64


@dataclass(frozen=True)
class OptimizeOptions:
    """What to build and how to judge it (the flags of ``inferplex optimize``)."""

    int8: bool = True
    fp16: bool = False
    graph: bool = False
    method: Literal["auto", "dynamic", "static"] = "auto"
    static_format: StaticFormat = "qoperator"
    calibration: Path | None = None
    evaluation: Path | None = None
    task: Task = "auto"
    output: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    batch_size: int = 32
    rounds: int = 7
    round_s: float = 0.25
    #: intra-op threads of every session timed; 0: as many as the server gives the model
    threads: int = 0
    #: "wall": elapsed time per call; "cpu": the calling thread's CPU time per call, which
    #: other processes on a shared machine barely disturb (needs threads=1, where ONNX Runtime
    #: computes on the calling thread)
    clock: Literal["wall", "cpu"] = "wall"
    calibration_batch_size: int = 16
    report_dir: Path | None = None


@dataclass(frozen=True)
class OptimizeResult:
    """The outcome: the report, and the new version when one was written."""

    report: Report
    version: int | None
    model_path: Path | None
    report_paths: list[Path]

    @property
    def promoted(self) -> bool:
        return self.version is not None


@dataclass(frozen=True)
class _Parent:
    model_dir: Path
    version: int
    path: Path
    config: ModelConfig | None
    versions: list[int]


def optimize(
    repository: Path,
    model: str,
    version: int | None = None,
    options: OptimizeOptions | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> OptimizeResult:
    """Optimise one version (default: the highest) of an ONNX model in a repository.

    Raises ModelNotFoundError / ConfigError when the model cannot be found or is not ONNX, and
    InvalidInputError for bad options or data files; "not promoted" is a result, not an error.
    """
    options = options or OptimizeOptions()
    _check_options(options)
    parent = _find_parent(repository, model, version)
    options = replace(options, threads=_served_threads(parent, options.threads))
    proto = onnx.load(str(parent.path), load_external_data=False)
    specs = input_specs(proto)
    calibration = _load_data(options.calibration, specs, "calibration set")
    evaluation = (
        _load_data(options.evaluation, specs, "evaluation set")
        or calibration
        or synthetic(specs, SYNTHETIC_ROWS)
    )
    output = _output_name(proto, options.output)
    task = resolve_task(options.task, evaluation.labels is not None)
    batches = _batch_sizes(specs, parent.config, options.batch_size)
    if not all(spec.batchable for spec in specs):
        evaluation = evaluation.whole_batches(batches[0])
    report = Report(
        model=model,
        parent_version=parent.version,
        parent_file=str(parent.path.relative_to(repository)),
        parent_size_bytes=measure.model_size(parent.path),
        task=task,
        evaluation=_describe(evaluation, calibration),
        calibration=calibration.source if calibration else None,
        thresholds=options.thresholds,
        machine=measure.machine(),
        rounds=options.rounds,
        threads=options.threads,
        clock=options.clock,
    )
    with tempfile.TemporaryDirectory(prefix="inferplex-optimize-") as work:
        built = _build(parent.path, Path(work), options, proto, calibration, log)
        log(f"measuring {len(built)} variant(s) against FP32 at batch sizes {batches}")
        _measure(report, parent.path, built, evaluation, output, batches, task, options)
        report.machine["load_after"] = round(os.getloadavg()[0], 2)
        best = _best(report.candidates, max(batches))
        if best is None:
            paths = report.save(parent.model_dir)
            new_version, model_path = None, None
        else:
            new_version = max(parent.versions) + 1
            report.promoted, report.new_version = best.name, new_version
            _check_policy(report, parent, new_version)
            source = next(path for name, path, _ in built if name == best.name)
            model_path = _write_version(parent, new_version, source, report)
            paths = sorted(model_path.parent.glob(f"{REPORT_STEM}.*"))
    if options.report_dir:
        paths += report.save(options.report_dir)
    return OptimizeResult(report, new_version, model_path, paths)


# --------------------------------------------------------------------------- steps


def _check_options(options: OptimizeOptions) -> None:
    if not (options.int8 or options.fp16 or options.graph):
        raise InvalidInputError("nothing to do: ask for int8, fp16 and/or graph optimisation")
    for name in ("batch_size", "rounds", "calibration_batch_size"):
        if getattr(options, name) < 1:
            raise InvalidInputError(f"{name} must be at least 1, got {getattr(options, name)}")
    if options.threads < 0:
        raise InvalidInputError(f"threads must be 0 (as served) or more, got {options.threads}")
    if options.clock == "cpu" and options.threads != 1:
        raise InvalidInputError(
            f"clock 'cpu' needs threads 1 (got {options.threads}): with more, ONNX Runtime "
            "computes on pool threads the calling thread's CPU time does not see"
        )
    if options.round_s <= 0:
        raise InvalidInputError(f"round_s must be positive, got {options.round_s}")


def _find_parent(repository: Path, model: str, version: int | None) -> _Parent:
    model_dir = repository / model
    if not model_dir.is_dir():
        raise ModelNotFoundError(f"no model '{model}' in repository '{repository}'")
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        raise ConfigError(f"model '{model}' has no version folder (expected e.g. {model}/1/)")
    if version is not None and version not in versions:
        raise ModelNotFoundError(f"model '{model}' has no version {version} (found {versions})")
    # versions this tool wrote hold its report: they are variants, not parents
    written = [v for v in versions if (model_dir / str(v) / f"{REPORT_STEM}.json").is_file()]
    originals = [v for v in versions if v not in written]
    if version is None:
        if not originals:
            raise ConfigError(
                f"model '{model}': every version ({versions}) was written by inferplex optimize; "
                "put the original model back, or name a version to optimise"
            )
        chosen = originals[-1]
    elif version in written:
        hint = f"; its parent is version {originals[-1]}" if originals else ""
        raise ConfigError(
            f"model '{model}' version {version} was written by inferplex optimize (it holds "
            f"{REPORT_STEM}.json): optimise the original model instead{hint}"
        )
    else:
        chosen = version
    config = read_model_config(model_dir)
    kind = (config.backend or config.platform) if config else ""
    if kind and kind not in ("onnxruntime", "onnxruntime_onnx"):
        raise ConfigError(f"model '{model}' runs on '{kind}'; only ONNX models can be optimised")
    filename = (config.default_model_filename if config else "") or ONNX_FILENAME
    path = model_dir / str(chosen) / filename
    if not path.is_file():
        raise ConfigError(f"model '{model}' version {chosen} has no file '{filename}'")
    return _Parent(model_dir, chosen, path, config, versions)


def _served_threads(parent: _Parent, wanted: int) -> int:
    """``wanted``, or for 0 the intra-op threads the server gives each instance of the model
    by default (its ``intra_op_thread_count`` parameter, else the cores divided among its
    instances): the figures then hold for the model as served."""
    if wanted:
        return wanted
    try:
        return plan_model(parent.model_dir).instances[0].intra_op_threads
    except ConfigError as exc:  # e.g. a KIND_GPU model on a machine without a GPU
        raise ConfigError(
            f"{exc.message} (working out the threads the server would give it; name them "
            "with threads / --threads N to optimise it here)"
        ) from None


def _load_data(path: Path | None, specs: list[InputSpec], what: str) -> DataSet | None:
    if path is None:
        return None
    return load_npz_dir(path, specs, what) if path.is_dir() else load_npz([path], specs, what)


def _describe(evaluation: DataSet, calibration: DataSet | None) -> str:
    labels = "with labels" if evaluation.labels is not None else "no labels"
    text = f"{evaluation.source}, {evaluation.rows} rows, {labels}"
    if evaluation is calibration:
        text += " (the calibration set: not held out)"
    return text


def _output_name(proto: onnx.ModelProto, wanted: str | None) -> str:
    floats = [
        o.name
        for o in proto.graph.output
        if o.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    ]
    if wanted is None:
        if not floats:
            raise InvalidInputError("the model has no floating-point output to compare")
        return floats[0]
    if wanted not in floats:
        raise InvalidInputError(
            f"output '{wanted}' is not a floating-point output of the model; "
            f"expected one of {floats}"
        )
    return wanted


def _batch_sizes(specs: list[InputSpec], config: ModelConfig | None, wanted: int) -> list[int]:
    """1 and the throughput batch when every input is batchable (bounded by the config's
    max_batch_size); otherwise the model's fixed first dimension."""
    if all(spec.batchable for spec in specs):
        if config is not None and config.max_batch_size > 0:
            wanted = min(wanted, config.max_batch_size)
        return sorted({1, wanted})
    first = {spec.shape[0] for spec in specs if spec.shape}
    fixed = [dim for dim in first if dim is not None]
    return fixed if len(first) == 1 and fixed else [1]


def _build(
    parent: Path,
    work: Path,
    options: OptimizeOptions,
    proto: onnx.ModelProto,
    calibration: DataSet | None,
    log: Callable[[str], None],
) -> list[tuple[str, Path, str]]:
    """The candidates: (name, file, recipe)."""
    built: list[tuple[str, Path, str]] = []
    if options.int8:
        if options.method == "auto":
            choice = choose_method(proto)
            method, reason = choice.method, choice.reason
        else:
            method, reason = options.method, f"{options.method} quantisation (asked for)"
        prepared = work / "preprocessed.onnx"
        log("preparing the graph for quantisation (shape inference, basic optimisation)")
        preprocess(parent, prepared)
        target = work / "int8.onnx"
        if method == "static":
            if calibration is None:
                raise InvalidInputError(
                    "static quantisation needs a calibration set: give calibration (.npz file "
                    "or folder) or use method 'dynamic'"
                )
            log(f"static INT8 ({options.static_format}), calibrating on {calibration.rows} rows")
            kept = quantize_static_int8(
                prepared, target, calibration, options.static_format, options.calibration_batch_size
            )
            name = f"int8-static-{options.static_format}"
            reason += f"; U8 activations, S8 per-channel weights, {options.static_format}"
            if kept:
                reason += f"; left in FP32: {', '.join(kept)} ({SHALLOW_CONVS})"
        else:
            log("dynamic INT8")
            quantize_dynamic_int8(prepared, target)
            name = "int8-dynamic"
            reason += "; S8 per-channel weights, embedding tables included"
        match_annotations(target, proto)
        built.append((name, target, reason))
    if options.fp16:
        log("FP16")
        convert_fp16(parent, work / "fp16.onnx")
        built.append(
            ("fp16", work / "fp16.onnx", "FP16 weights and arithmetic, FP32 inputs/outputs")
        )
    if options.graph:
        # beside each variant, not instead of it: the measurement decides (an INT8 model
        # optimised offline has run slower than as it was)
        log("offline graph optimisation")
        for name, path, recipe in list(built) or [("fp32", parent, "FP32")]:
            target = work / f"{name}-graph.onnx"
            optimize_graph(path, target)
            built.append((f"{name}+graph", target, recipe + "; offline ORT graph optimisation"))
    return built


def _measure(
    report: Report,
    parent: Path,
    built: list[tuple[str, Path, str]],
    evaluation: DataSet,
    output: str,
    batches: list[int],
    task: Literal["classification", "embedding"],
    options: OptimizeOptions,
) -> None:
    sessions = {"fp32": measure.open_session(parent, options.threads)}
    sessions.update({name: measure.open_session(path, options.threads) for name, path, _ in built})
    timings: dict[str, dict[int, measure.Timing]] = {name: {} for name in sessions}
    for batch in batches:
        feed = evaluation.feed(batch)
        runners = {name: _runner(session, feed) for name, session in sessions.items()}
        clock = time.thread_time if options.clock == "cpu" else time.perf_counter
        for name, timing in measure.time_interleaved(
            runners, batch, options.rounds, options.round_s, clock
        ).items():
            timings[name][batch] = timing
    chunk = max(batches)
    reference = measure.run_all(sessions["fp32"], evaluation, output, chunk)
    parent_size = measure.model_size(parent)
    for name, path, recipe in built:
        accuracy = measure.agreement(
            reference,
            measure.run_all(sessions[name], evaluation, output, chunk),
            output,
            evaluation.labels,
        )
        pairs = {b: (timings["fp32"][b], timings[name][b]) for b in batches}
        size = measure.model_size(path)
        report.candidates.append(
            CandidateReport(
                name=name,
                recipe=recipe,
                size_bytes=size,
                size_ratio=size / parent_size,
                timings=pairs,
                accuracy=accuracy,
                failures=failures(pairs, accuracy, task, options.thresholds),
            )
        )


def _runner(session: ort.InferenceSession, feed: dict[str, np.ndarray]) -> Callable[[], object]:
    return lambda: session.run(None, feed)


def _best(candidates: list[CandidateReport], batch: int) -> CandidateReport | None:
    eligible = [c for c in candidates if c.eligible]
    return max(eligible, key=lambda c: c.throughput_ratio(batch), default=None)


def _check_policy(report: Report, parent: _Parent, new_version: int) -> None:
    policy = parent.config.version_policy if parent.config else None
    if policy is not None and new_version not in policy.select([*parent.versions, new_version]):
        report.notes.append(
            f"the model's version_policy ({policy.policy}) does not serve version {new_version}:"
            " add it to the config to serve it"
        )


def _write_version(parent: _Parent, version: int, source: Path, report: Report) -> Path:
    """Write the version folder under a hidden name, then rename it: a server watching the
    repository never sees a half-written version."""
    staging = parent.model_dir / f".optimize-{version}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    shutil.copyfile(source, staging / parent.path.name)
    report.save(staging)
    final = parent.model_dir / str(version)
    staging.rename(final)
    return final / parent.path.name
