"""The regression gate: a bench run against a baseline run.

Every case present in both runs (matched by :attr:`CaseResult.key`) is compared figure by
figure. A figure that moved by more than the threshold (percent of the baseline) is flagged
``better`` or ``worse``; a *regression* is a ``worse`` gating figure (throughput lower, or a
client-side latency percentile higher), a case of the baseline that is missing now, or a
compatibility regression (an endpoint, datatype or model that worked and fails now). The
server-side breakdown is flagged too but only informs: it explains a regression, it does
not make one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from inferplex_tools.benchtool import compat as compat_report
from inferplex_tools.benchtool.results import BenchReport, CaseResult

#: (figure, higher is better) that decide pass or fail
GATING = (
    ("throughput", True),
    ("p50_ms", False),
    ("p90_ms", False),
    ("p95_ms", False),
    ("p99_ms", False),
)
#: server-side figures flagged for information
INFORMATIVE = (
    ("server_request_us", False),
    ("queue_us", False),
    ("compute_infer_us", False),
    ("batch_size", True),
)


@dataclass(frozen=True)
class Change:
    """One figure that moved by more than the threshold."""

    key: str
    figure: str
    baseline: float
    current: float
    percent: float
    better: bool
    gating: bool

    @property
    def regression(self) -> bool:
        return self.gating and not self.better


@dataclass
class Comparison:
    """Everything that moved, what is missing, and the verdict."""

    threshold: float
    compared: int = 0
    changes: list[Change] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    compat: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def passed(self) -> bool:
        return not self.regressions and not self.missing and not self.compat

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold_percent": self.threshold,
            "passed": self.passed,
            "cases_compared": self.compared,
            "changes": [{**c.__dict__, "regression": c.regression} for c in self.changes],
            "missing_cases": self.missing,
            "new_cases": self.added,
            "compat_regressions": self.compat,
        }

    def format(self) -> str:
        lines = [
            f"compare: {self.compared} cases, threshold ±{self.threshold:g}%: "
            + ("PASS" if self.passed else f"FAIL ({self._failures()})")
        ]
        for change in self.changes:
            if change.regression:
                tag = "REGRESSION"
            elif change.better:
                tag = "better"
            else:
                tag = "worse (info)"
            lines.append(
                f"  {tag:12} {change.key} {change.figure}: {change.baseline:.4g} -> "
                f"{change.current:.4g} ({change.percent:+.1f}%)"
            )
        lines += [
            f"  MISSING      {key} (in the baseline, not measured now)" for key in self.missing
        ]
        lines += [f"  new          {key} (not in the baseline)" for key in self.added]
        lines += [f"  COMPAT       {line}" for line in self.compat]
        return "\n".join(lines)

    def _failures(self) -> str:
        parts = []
        if self.regressions:
            parts.append(f"{len(self.regressions)} regressed figures")
        if self.missing:
            parts.append(f"{len(self.missing)} missing cases")
        if self.compat:
            parts.append(f"{len(self.compat)} compatibility regressions")
        return ", ".join(parts)


def compare(baseline: BenchReport, current: BenchReport, threshold: float = 5.0) -> Comparison:
    """Compare ``current`` with ``baseline``; ``threshold`` in percent of the baseline."""
    if threshold < 0:
        raise ValueError(f"--threshold must be >= 0 percent, got {threshold}")
    before = {r.key: r for r in baseline.results}
    now = {r.key: r for r in current.results}
    comparison = Comparison(threshold)
    comparison.missing = sorted(set(before) - set(now))
    comparison.added = sorted(set(now) - set(before))
    for key in sorted(set(before) & set(now)):
        comparison.compared += 1
        comparison.changes += _changes(before[key], now[key], threshold)
    comparison.compat = compat_report.regressions(baseline.compat, current.compat)
    return comparison


def _changes(before: CaseResult, now: CaseResult, threshold: float) -> list[Change]:
    changes = []
    pairs = [(f, hb, True, before.latency, now.latency) for f, hb in GATING]
    if before.server and now.server:
        pairs += [(f, hb, False, before.server, now.server) for f, hb in INFORMATIVE]
    for figure, higher_is_better, gating, old_figures, new_figures in pairs:
        old, new = old_figures.get(figure), new_figures.get(figure)
        if old is None or new is None or not _finite(old, new) or old == 0:
            continue
        percent = (new - old) / abs(old) * 100
        if abs(percent) <= threshold:
            continue
        better = percent > 0 if higher_is_better else percent < 0
        changes.append(Change(before.key, figure, old, new, percent, better, gating))
    return changes


def _finite(*values: float) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)
