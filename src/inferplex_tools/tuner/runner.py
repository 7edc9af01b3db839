"""A tune run: successive halving where each rung's candidates are served by one launched
server (a copy of the model(s) per candidate) and measured with the bench engine.

Several models are tuned *together*, as they will share the machine: a candidate's settings
apply to every model of the set, their loads run at the same time (the bench's
``--together``), and a candidate's figures are the models' summed throughput and their worst
p99.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.launch import Ports, launch
from inferplex_tools.benchtool.progress import Progress
from inferplex_tools.benchtool.sweep import BenchOptions, run
from inferplex_tools.tuner.configs import (
    Quantizer,
    current_candidate,
    int8_quantizer,
    materialise,
    model_file,
    read_raw,
)
from inferplex_tools.tuner.decision import MIN_GAIN, Decision, decide
from inferplex_tools.tuner.journal import Journal
from inferplex_tools.tuner.pareto import Point, best_under, frontier
from inferplex_tools.tuner.search import Rung, rung_count, successive_halving
from inferplex_tools.tuner.space import Candidate, SearchSpace, sample


@dataclass
class TuneOptions:
    """The ``inferplex tune`` flags."""

    repository: Path
    models: list[str]
    space: SearchSpace
    protocol: str = "http"
    concurrency: int = 8
    """closed-loop clients per model"""
    batch_size: int = 1
    warmup: float = 0.5
    window: float = 1.0
    """seconds per window at rung 0; rung r uses window * eta**r"""
    windows: int = 3
    eta: int = 3
    max_candidates: int = 0
    max_rungs: int = 0
    latency_target_ms: float | None = None
    min_gain: float = MIN_GAIN
    """the winner replaces the current configuration only with more throughput gain"""
    results: Path | None = None
    seed: int = 0
    server_args: list[str] = field(default_factory=list)
    ports: Ports | None = None
    """fixed (HTTP, gRPC, metrics) ports for each rung's server; free ones when None"""

    @property
    def label(self) -> str:
        """The model set's name in the results file."""
        return "+".join(self.models)

    def workload(self) -> dict[str, Any]:
        """What makes two measurements comparable (the results file's reuse rule)."""
        return {
            "protocol": self.protocol,
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "window": self.window,
            "windows": self.windows,
            "eta": self.eta,
            "server_args": list(self.server_args),
        }


@dataclass
class TuneResult:
    """The search and its conclusions."""

    candidates: list[Candidate]
    rungs: list[Rung]
    points: list[Point]
    """every candidate's rung-0 measurement (the same budget for all)"""
    front: list[Point]
    best: Point | None
    notes: list[str]
    current: Point | None = None
    """the model's current configuration, measured in the rung the winner comes from"""
    decision: Decision | None = None
    """whether ``best`` replaces the current configuration (None without a best)"""


async def tune(
    options: TuneOptions,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> TuneResult:
    default_batch = _check_models(options)
    quantize, notes = _int8(options)
    candidates = sample(
        options.space.candidates(default_batch), options.max_candidates, options.seed
    )
    current = _current(options, candidates, notes)
    journal = Journal.open(options.results, options.workload())
    if journal.resumed:
        notes.append(f"resumed: {journal.resumed} measurements read from {options.results}")
    progress = progress or Progress(0, enabled=False)
    planned = rung_count(len(candidates), options.eta)
    if options.max_rungs > 0:
        planned = min(planned, options.max_rungs)
    progress.total = sum(max(1, -(-len(candidates) // options.eta**r)) for r in range(planned))

    async def measure(alive: Sequence[Candidate], rung: int) -> dict[Candidate, Point]:
        todo = [c for c in alive if journal.get(options.label, c.key, rung) is None]
        if todo:
            await _measure_rung(options, todo, rung, quantize, journal, progress, say)
        progress.update(progress.done + len(alive) - len(todo))
        points = {}
        for candidate in alive:
            line = journal.get(options.label, candidate.key, rung)
            if line is not None and not line.get("error"):
                points[candidate] = Point(
                    candidate.key, float(line["throughput"]), float(line["p99_ms"]), candidate
                )
        return points

    rungs = await successive_halving(
        candidates, measure, options.eta, options.latency_target_ms, options.max_rungs
    )
    # the frontier compares like with like: rung 0 measured every candidate the same way
    points = list(rungs[0].measured.values()) if rungs else []
    # the deepest rung that measured anything decides (a failed last rung falls back)
    deciding = next((r for r in reversed(rungs) if r.measured), None)
    winners = [deciding.measured[c] for c in deciding.kept] if deciding else []
    best = best_under(winners, options.latency_target_ms)
    if best is None:
        notes.append(_why_no_best(points, options.latency_target_ms))
    result = TuneResult(candidates, rungs, points, frontier(points), best, notes)
    if best is not None and deciding is not None:
        if current is not None and current not in deciding.measured:
            progress.total += 1  # eliminated earlier: measured again beside the winner
            deciding.measured.update(await measure([current], deciding.index))
        result.current = deciding.measured.get(current) if current is not None else None
        result.decision = decide(best, result.current, options.latency_target_ms, options.min_gain)
    progress.close()
    return result


def _why_no_best(points: list[Point], target_ms: float | None) -> str:
    if not points:
        return "no candidate could be measured (see the failures above)"
    lowest = min(points, key=lambda p: p.p99_ms)
    return (
        f"no candidate met p99 <= {target_ms:g} ms; the lowest p99 was "
        f"{lowest.p99_ms:.3f} ms ({lowest.key})"
    )


def _current(
    options: TuneOptions, candidates: list[Candidate], notes: list[str]
) -> Candidate | None:
    """The current configuration of the model(s) as a candidate, added to ``candidates``
    when it is not among them (so the winner has a bar); None (noted) when models tuned
    together are configured differently."""
    found = {
        options.space.settle(current_candidate(options.repository / m)) for m in options.models
    }
    if len(found) > 1:
        notes.append(
            "the models are configured differently now: there is no one current "
            "configuration to compare the winner with"
        )
        return None
    current = found.pop()
    if current not in candidates:
        candidates.append(current)
    return current


def _int8(options: TuneOptions) -> tuple[Quantizer | None, list[str]]:
    """The INT8 quantizer when the space has int8, and a note on it; int8 leaves the space
    when there is no quantizer or a model cannot be quantized."""
    if "int8" not in options.space.precision:
        return None, []
    quantize, note = int8_quantizer()
    refusals = [
        f"{model}: {reason}"
        for model in options.models
        if quantize is not None
        and (reason := quantize.refusal(model_file(options.repository / model)))
    ]
    if refusals:
        quantize, note = None, "INT8 skipped: " + "; ".join(refusals)
    if quantize is None:
        kept = [p for p in options.space.precision if p != "int8"]
        options.space.precision = kept or ["fp32"]
    return quantize, [note]


def _check_models(options: TuneOptions) -> int:
    """BenchError for a missing model or a set that cannot share one batch setting; returns
    the default max batch size (the smallest of the set)."""
    if not options.models:
        raise BenchError("--model: give the model(s) to tune")
    batches = []
    for model in options.models:
        model_dir = options.repository / model
        if not model_dir.is_dir():
            raise BenchError(f"--model: no folder {model_dir}")
        raw, _ = read_raw(model_dir)
        batches.append(int(raw.get("max_batch_size", 0)))
    if len({b > 0 for b in batches}) > 1:
        raise BenchError(
            "--model: tuned together, the models must all batch (max_batch_size > 0) or none"
        )
    options.space.check(model_batches=batches[0] > 0)
    return min(batches)


async def _measure_rung(
    options: TuneOptions,
    todo: list[Candidate],
    rung: int,
    quantize: Quantizer | None,
    journal: Journal,
    progress: Progress,
    say: Callable[[str], None],
) -> None:
    window = options.window * options.eta**rung
    with tempfile.TemporaryDirectory(prefix="inferplex-tune-") as folder:
        served = {
            model: materialise(options.repository / model, todo, Path(folder), quantize)
            for model in options.models
        }
        with launch(Path(folder), options.server_args, ports=options.ports) as server:
            for candidate in todo:
                bench = BenchOptions(
                    url=server.address(options.protocol),
                    models=[served[model][candidate] for model in options.models],
                    protocol=options.protocol,
                    concurrency=[options.concurrency],
                    batch_size=options.batch_size,
                    warmup=options.warmup,
                    window=window,
                    max_windows=options.windows,
                    stable_count=options.windows,
                    together=True,
                )
                line: dict[str, Any] = {
                    "model": options.label,
                    "candidate_key": candidate.key,
                    "candidate": candidate.to_dict(),
                    "rung": rung,
                    "seconds": window * options.windows,
                }
                report = await run(bench)
                failed = {**report.compat["models"]["failed"], **report.compat["models"]["partly"]}
                if failed or len(report.results) != len(options.models):
                    line["error"] = "; ".join(f"{m}: {e}" for m, e in failed.items()) or "no result"
                    say(f"{candidate.key}: FAILED: {line['error']}")
                else:
                    line.update(
                        throughput=sum(r.throughput for r in report.results),
                        p50_ms=max(r.latency["p50_ms"] for r in report.results),
                        p99_ms=max(r.latency["p99_ms"] for r in report.results),
                        per_model={
                            model: {
                                "throughput": r.throughput,
                                "p99_ms": r.latency["p99_ms"],
                                "server_batch_size": (r.server or {}).get("batch_size"),
                            }
                            for model, r in zip(options.models, report.results, strict=True)
                        },
                    )
                journal.add(line)
                progress.update(
                    progress.done + 1,
                    f"rung {rung} {candidate.key} "
                    + (f"{line['throughput']:.0f} req/s" if "throughput" in line else "failed"),
                )
