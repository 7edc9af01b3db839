"""A tune run: successive halving where each rung's candidates are served by one launched
server (a copy of the model per candidate) and measured with the bench engine."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferplex.benchtool import BenchError
from inferplex.benchtool.launch import launch
from inferplex.benchtool.progress import Progress
from inferplex.benchtool.sweep import BenchOptions, run
from inferplex.tuner.configs import int8_quantizer, materialise, read_raw
from inferplex.tuner.journal import Journal
from inferplex.tuner.pareto import Point, best_under, frontier
from inferplex.tuner.search import Rung, rung_count, successive_halving
from inferplex.tuner.space import Candidate, SearchSpace, sample


@dataclass
class TuneOptions:
    """The ``inferplex tune`` flags."""

    repository: Path
    model: str
    space: SearchSpace
    protocol: str = "http"
    concurrency: int = 8
    batch_size: int = 1
    warmup: float = 0.5
    window: float = 1.0
    """seconds per window at rung 0; rung r uses window * eta**r"""
    windows: int = 3
    eta: int = 3
    max_candidates: int = 0
    max_rungs: int = 0
    latency_target_ms: float | None = None
    results: Path | None = None
    seed: int = 0
    server_args: list[str] = field(default_factory=list)

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


async def tune(
    options: TuneOptions,
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> TuneResult:
    model_dir = options.repository / options.model
    if not model_dir.is_dir():
        raise BenchError(f"--model: no folder {model_dir}")
    raw, _ = read_raw(model_dir)
    default_batch = int(raw.get("max_batch_size", 0))
    options.space.check(model_batches=default_batch > 0)
    notes: list[str] = []
    quantize = None
    if "int8" in options.space.precision:
        quantize, note = int8_quantizer()
        notes.append(note)
        if quantize is None:
            options.space.precision = [p for p in options.space.precision if p != "int8"] or [
                "fp32"
            ]
    candidates = sample(
        options.space.candidates(default_batch), options.max_candidates, options.seed
    )
    journal = Journal.open(options.results, options.workload())
    if journal.resumed:
        notes.append(f"resumed: {journal.resumed} measurements read from {options.results}")
    progress = progress or Progress(0, enabled=False)
    rungs_planned = rung_count(len(candidates), options.eta)
    if options.max_rungs > 0:
        rungs_planned = min(rungs_planned, options.max_rungs)
    progress.total = sum(
        max(1, -(-len(candidates) // options.eta**r)) for r in range(rungs_planned)
    )

    async def measure(alive: Sequence[Candidate], rung: int) -> dict[Candidate, Point]:
        todo = [c for c in alive if journal.get(options.model, c.key, rung) is None]
        if todo:
            await _measure_rung(options, model_dir, todo, rung, quantize, journal, progress, say)
        progress.update(progress.done + len(alive) - len(todo))
        points = {}
        for candidate in alive:
            line = journal.get(options.model, candidate.key, rung)
            if line is not None and not line.get("error"):
                points[candidate] = _point(candidate, line)
        return points

    rungs = await successive_halving(
        candidates, measure, options.eta, options.latency_target_ms, options.max_rungs
    )
    progress.close()
    # the frontier compares like with like: rung 0 measured every candidate the same way
    points = list(rungs[0].measured.values()) if rungs else []
    # the deepest rung that measured anything decides (a failed last rung falls back)
    deciding = next((r for r in reversed(rungs) if r.measured), None)
    winners = [deciding.measured[c] for c in deciding.kept] if deciding else []
    best = best_under(winners, options.latency_target_ms)
    if best is None and points and options.latency_target_ms is not None:
        lowest = min(points, key=lambda p: p.p99_ms)
        notes.append(
            f"no candidate met p99 <= {options.latency_target_ms:g} ms; the lowest p99 was "
            f"{lowest.p99_ms:.3f} ms ({lowest.key})"
        )
    elif not points:
        notes.append("no candidate could be measured (see the failures above)")
    return TuneResult(candidates, rungs, points, frontier(points), best, notes)


def _point(candidate: Candidate, line: dict[str, Any]) -> Point:
    return Point(candidate.key, float(line["throughput"]), float(line["p99_ms"]), candidate)


async def _measure_rung(
    options: TuneOptions,
    model_dir: Path,
    todo: list[Candidate],
    rung: int,
    quantize: Any,
    journal: Journal,
    progress: Progress,
    say: Callable[[str], None],
) -> None:
    window = options.window * options.eta**rung
    with tempfile.TemporaryDirectory(prefix="inferplex-tune-") as folder:
        names = materialise(model_dir, todo, Path(folder), quantize)
        with launch(Path(folder), options.server_args) as server:
            for candidate in todo:
                bench = BenchOptions(
                    url=server.address(options.protocol),
                    models=[names[candidate]],
                    protocol=options.protocol,
                    concurrency=[options.concurrency],
                    batch_size=options.batch_size,
                    warmup=options.warmup,
                    window=window,
                    max_windows=options.windows,
                    stable_count=options.windows,
                )
                line: dict[str, Any] = {
                    "model": options.model,
                    "candidate_key": candidate.key,
                    "candidate": candidate.to_dict(),
                    "rung": rung,
                    "seconds": window * options.windows,
                }
                report = await run(bench)
                if report.results:
                    result = report.results[0]
                    line.update(
                        throughput=result.throughput,
                        p50_ms=result.latency["p50_ms"],
                        p99_ms=result.latency["p99_ms"],
                        server_batch_size=(result.server or {}).get("batch_size"),
                    )
                else:
                    reasons = report.compat["models"]["failed"] or report.compat["models"]["partly"]
                    line["error"] = next(iter(reasons.values()), "no result")
                    say(f"{candidate.key}: FAILED: {line['error']}")
                journal.add(line)
                progress.update(
                    progress.done + 1,
                    f"rung {rung} {candidate.key} "
                    + (f"{line['throughput']:.0f} req/s" if "throughput" in line else "failed"),
                )
