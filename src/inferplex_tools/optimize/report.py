"""The optimiser's report: printed as a table, saved as JSON and Markdown."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inferplex_tools.optimize.measure import Agreement, Timing, speedup
from inferplex_tools.optimize.promotion import Thresholds

REPORT_STEM = "optimize_report"
_CLOCKS = {"wall": "wall-clock time per call", "cpu": "thread CPU time per call"}


@dataclass(frozen=True)
class CandidateReport:
    """One optimised variant: how it was made and what it measured."""

    name: str
    recipe: str
    size_bytes: int
    size_ratio: float
    timings: dict[int, tuple[Timing, Timing]]  # batch -> (parent, candidate)
    accuracy: Agreement
    failures: list[str]

    @property
    def eligible(self) -> bool:
        return not self.failures

    def speedup(self, batch: int) -> float:
        parent, candidate = self.timings[batch]
        return speedup(parent, candidate)

    def throughput_ratio(self, batch: int) -> float:
        """Candidate items/s over parent items/s: at one batch size, the speedup."""
        return self.speedup(batch)

    def latency_ratio(self, batch: int) -> float:
        return 1.0 / self.speedup(batch)


@dataclass
class Report:
    """Everything one ``optimize`` run measured and decided."""

    model: str
    parent_version: int
    parent_file: str
    parent_size_bytes: int
    task: str
    evaluation: str
    calibration: str | None
    thresholds: Thresholds
    machine: dict[str, Any]
    rounds: int
    threads: int
    clock: str = "wall"
    candidates: list[CandidateReport] = field(default_factory=list)
    promoted: str | None = None
    new_version: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def batch_sizes(self) -> list[int]:
        return sorted(self.candidates[0].timings) if self.candidates else []

    def noise(self) -> dict[int, float]:
        """Per batch size, the spread of the parent's per-round medians."""
        if not self.candidates:
            return {}
        return {b: t[0].spread for b, t in sorted(self.candidates[0].timings.items())}

    def verdict(self) -> str:
        if self.promoted is not None:
            return f"promoted: {self.promoted} -> {self.model} version {self.new_version}"
        return "not promoted: " + "; ".join(
            f"{c.name}: {', '.join(c.failures)}" for c in self.candidates
        )

    # ------------------------------------------------------------------ renderings

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every figure, in milliseconds and plain ratios."""
        return {
            "model": self.model,
            "parent_version": self.parent_version,
            "parent_file": self.parent_file,
            "parent_size_bytes": self.parent_size_bytes,
            "task": self.task,
            "evaluation": self.evaluation,
            "calibration": self.calibration,
            "thresholds": asdict(self.thresholds),
            "machine": self.machine,
            "rounds": self.rounds,
            "threads": self.threads,
            "clock": self.clock,
            "noise": {str(b): round(s, 4) for b, s in self.noise().items()},
            "candidates": [_candidate_dict(c) for c in self.candidates],
            "promoted": self.promoted,
            "new_version": self.new_version,
            "verdict": self.verdict(),
            "notes": self.notes,
        }

    def to_text(self) -> str:
        """The table printed by the command."""
        lines = [
            f"optimize {self.model} version {self.parent_version} ({self.parent_file}, "
            f"{_mb(self.parent_size_bytes)})",
            f"machine: {self.machine.get('cpu')}, {self.machine.get('cpus')} CPUs, onnxruntime "
            f"{self.machine.get('onnxruntime')}, load average {self.machine.get('load_average_1m')}"
            f" -> {self.machine.get('load_after')}; {self.rounds} interleaved rounds, "
            f"{self.threads or 'default'} threads, {_CLOCKS[self.clock]}",
            "noise (spread of the FP32 per-round medians): "
            + ", ".join(f"batch {b}: {s:.0%}" for b, s in self.noise().items()),
            f"evaluation: {self.evaluation}; task {self.task}",
        ]
        if self.calibration:
            lines.append(f"calibration: {self.calibration}")
        header = f"{'variant':<27} {'size':>18}"
        for batch in self.batch_sizes:
            header += f" {_column(batch):>22}"
        header += f" {'accuracy':>30}"
        lines += ["", header]
        if self.candidates:
            lines.append(self._parent_row())
        for candidate in self.candidates:
            size = f"{_mb(candidate.size_bytes):>9} ({candidate.size_ratio:>4.0%})"
            row = f"{candidate.name:<27} {size}"
            for batch in self.batch_sizes:
                timing = candidate.timings[batch][1]
                row += f" {_figure(timing):>13} ({candidate.speedup(batch):>5.2f}x)"
            row += f" {_accuracy(candidate.accuracy, self.task):>30}"
            lines.append(row)
        lines.append("")
        for candidate in self.candidates:
            state = (
                "eligible" if candidate.eligible else "rejected: " + "; ".join(candidate.failures)
            )
            lines.append(f"{candidate.name}: {candidate.recipe}; {state}")
        lines += [*self.notes, self.verdict()]
        return "\n".join(lines)

    def _parent_row(self) -> str:
        row = f"{'fp32 (parent)':<27} {_mb(self.parent_size_bytes):>9} {'(100%)':>7}"
        for batch in self.batch_sizes:
            timing = self.candidates[0].timings[batch][0]
            row += f" {_figure(timing):>13} {'':>8}"
        accuracy = self.candidates[0].accuracy.parent_accuracy
        shown = "reference" if accuracy is None else f"accuracy {accuracy:.2%}"
        return row + f" {shown:>30}"

    def to_markdown(self) -> str:
        """The same report as a Markdown document."""
        batches = self.batch_sizes
        head = ["variant", "size", "size ratio"]
        for batch in batches:
            head += [f"b{batch} ms", f"b{batch} speedup", f"b{batch} throughput ratio"]
        head += ["accuracy", "verdict"]
        rows = [head, ["---"] * len(head)]
        for candidate in self.candidates:
            row = [candidate.name, _mb(candidate.size_bytes), f"{candidate.size_ratio:.1%}"]
            for batch in batches:
                row += [
                    f"{candidate.timings[batch][1].median_s * 1e3:.3f}",
                    f"{candidate.speedup(batch):.2f}x",
                    f"{candidate.throughput_ratio(batch):.2f}x",
                ]
            verdict = "eligible" if candidate.eligible else "; ".join(candidate.failures)
            row += [_accuracy(candidate.accuracy, self.task), verdict]
            rows.append(row)
        text = [
            f"# optimize: {self.model} version {self.parent_version}",
            "",
            f"- parent: `{self.parent_file}`, {_mb(self.parent_size_bytes)}",
            f"- evaluation: {self.evaluation} (task {self.task})",
            f"- calibration: {self.calibration or 'none'}",
            f"- machine: {json.dumps(self.machine)}; {self.rounds} interleaved rounds, "
            f"{self.threads or 'default'} threads, {_CLOCKS[self.clock]}",
            "- noise: " + ", ".join(f"batch {b}: {s:.0%}" for b, s in self.noise().items()),
            "",
            *("| " + " | ".join(r) + " |" for r in rows),
            "",
            *(f"- {note}" for note in self.notes),
            f"**{self.verdict()}**",
            "",
        ]
        return "\n".join(text)

    def save(self, folder: Path) -> list[Path]:
        """Write ``optimize_report.json`` and ``.md`` into a folder; returns their paths."""
        folder.mkdir(parents=True, exist_ok=True)
        json_path = folder / f"{REPORT_STEM}.json"
        markdown_path = folder / f"{REPORT_STEM}.md"
        json_path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        markdown_path.write_text(self.to_markdown())
        return [json_path, markdown_path]


def _candidate_dict(candidate: CandidateReport) -> dict[str, Any]:
    speed = {}
    for batch, (parent, timing) in sorted(candidate.timings.items()):
        speed[str(batch)] = {
            "parent_ms": round(parent.median_s * 1e3, 4),
            "candidate_ms": round(timing.median_s * 1e3, 4),
            "parent_p90_ms": round(parent.p90_s * 1e3, 4),
            "candidate_p90_ms": round(timing.p90_s * 1e3, 4),
            "latency_ratio": round(candidate.latency_ratio(batch), 4),
            "speedup": round(candidate.speedup(batch), 4),
            "parent_items_per_s": round(parent.items_per_s, 2),
            "candidate_items_per_s": round(timing.items_per_s, 2),
            "throughput_ratio": round(candidate.throughput_ratio(batch), 4),
            "calls": [parent.calls, timing.calls],
        }
    accuracy = asdict(candidate.accuracy)
    accuracy["accuracy_drop"] = candidate.accuracy.accuracy_drop
    return {
        "name": candidate.name,
        "recipe": candidate.recipe,
        "size_bytes": candidate.size_bytes,
        "size_ratio": round(candidate.size_ratio, 4),
        "speed": speed,
        "accuracy": accuracy,
        "eligible": candidate.eligible,
        "failures": candidate.failures,
    }


def _column(batch: int) -> str:
    """Batch 1 is shown as latency, larger batches as throughput; both with the speedup."""
    return "b1 ms (speedup)" if batch == 1 else f"b{batch} items/s (ratio)"


def _figure(timing: Timing) -> str:
    if timing.batch_size == 1:
        return f"{timing.median_s * 1e3:.3f}"
    return f"{timing.items_per_s:,.0f}"


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} kB"


def _accuracy(accuracy: Agreement, task: str) -> str:
    if accuracy.candidate_accuracy is not None:
        drop = accuracy.accuracy_drop or 0.0
        change = "±0" if abs(drop) < 5e-5 else f"{-drop * 100:+.2f}"
        return f"accuracy {accuracy.candidate_accuracy:.2%} ({change} pts)"
    if task == "classification" and accuracy.top1_agreement is not None:
        return f"top-1 agreement {accuracy.top1_agreement:.2%}"
    return f"cosine {accuracy.cosine_mean:.4f} (min {accuracy.cosine_min:.4f})"
