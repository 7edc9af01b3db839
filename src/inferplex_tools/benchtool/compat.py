"""The compatibility report: which endpoints, datatypes and models worked against a server.

Every control call and every model's probe request is recorded here as it happens, so the
report says what a server (ours or another) really answered, not what it advertises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Outcome:
    ok: int = 0
    failed: int = 0
    last_error: str = ""


@dataclass
class CompatLog:
    """Outcomes of endpoints (by protocol and route), datatypes and models."""

    endpoints: dict[str, _Outcome] = field(default_factory=dict)
    datatypes: dict[str, _Outcome] = field(default_factory=dict)
    models: dict[str, _Outcome] = field(default_factory=dict)

    def endpoint(self, name: str, ok: bool, error: str = "") -> None:
        """``name`` is the protocol and route, e.g. ``http GET /v2/models/{m}/config``."""
        _count(self.endpoints, name, ok, error)

    def datatype(self, name: str, ok: bool, error: str = "") -> None:
        _count(self.datatypes, name, ok, error)

    def model(self, name: str, ok: bool, error: str = "") -> None:
        _count(self.models, name, ok, error)

    def to_dict(self) -> dict[str, Any]:
        """Per section: ``worked`` (never failed), ``partly`` (worked and failed: an unknown
        model's 404 does not make an endpoint incompatible) and ``failed`` (never worked),
        the last two with the last error."""
        report: dict[str, Any] = {}
        for section, table in (
            ("endpoints", self.endpoints),
            ("datatypes", self.datatypes),
            ("models", self.models),
        ):
            items = sorted(table.items())
            report[section] = {
                "worked": [n for n, o in items if not o.failed],
                "partly": {n: o.last_error for n, o in items if o.failed and o.ok},
                "failed": {n: o.last_error for n, o in items if o.failed and not o.ok},
            }
        return report


def _count(table: dict[str, _Outcome], name: str, ok: bool, error: str) -> None:
    outcome = table.setdefault(name, _Outcome())
    if ok:
        outcome.ok += 1
    else:
        outcome.failed += 1
        outcome.last_error = error


def regressions(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Lines naming what worked in the baseline's report and fails (or is gone) now."""
    lines: list[str] = []
    for section in ("endpoints", "datatypes", "models"):
        before = baseline.get(section, {})
        now = current.get(section, {})
        failed_now = dict(now.get("failed", {}))
        if section == "models":  # a model failing at any level is a regression
            failed_now.update(now.get("partly", {}))
        worked_now = set(now.get("worked", [])) | set(now.get("partly", {}))
        for name in before.get("worked", []):
            if name in failed_now:
                lines.append(f"{section[:-1]} {name}: worked before, fails now: {failed_now[name]}")
            elif name not in worked_now:
                lines.append(f"{section[:-1]} {name}: worked before, not exercised now")
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The report as lines for the terminal."""
    lines = ["compatibility"]
    for section, table in report.items():
        worked = table.get("worked", [])
        partly = table.get("partly", {})
        failed = table.get("failed", {})
        lines.append(
            f"  {section}: {len(worked)} worked, {len(partly)} partly, {len(failed)} failed"
        )
        lines += [f"    ok      {name}" for name in worked]
        lines += [f"    partly  {name}: {reason}" for name, reason in partly.items()]
        lines += [f"    FAIL    {name}: {reason}" for name, reason in failed.items()]
    return "\n".join(lines)
