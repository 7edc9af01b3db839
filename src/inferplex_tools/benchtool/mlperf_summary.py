"""LoadGen's own summary (``mlperf_log_summary.txt``), read back as the source of every figure
an MLPerf run prints: the bench computes none of what LoadGen reports.

The file is LoadGen's text, one ``key : value`` per line in sections (results, additional
stats, test parameters), e.g.::

    Scenario : Server
    Completed samples per second    : 98.18
    Result is : INVALID
      Performance constraints satisfied : Yes
      Early stopping satisfied: NO
    Recommendations:
     * Would need to run at least 428 more queries, ...
    ...
    Scheduled samples per second : 98.23
    99.00 percentile latency (ns)   : 468983

The keys differ by scenario (Offline writes ``Samples per second``, SingleStream the
``90.0th percentile latency (ns)`` and ``QPS w/ loadgen overhead``), so every numeric line of
the results and additional stats is kept under LoadGen's own name, with the percentiles and
the constraints also picked out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from inferplex_tools.benchtool import BenchError

SUMMARY_FILE = "mlperf_log_summary.txt"
#: LoadGen's detailed log: one ``:::MLLOG {json}`` per line; its errors are only counted in
#: the summary, so their messages are read from here
DETAIL_FILE = "mlperf_log_detail.txt"
#: the section after which the lines are LoadGen's settings, not results
PARAMETERS_HEADER = "Test Parameters Used"
_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")
_SATISFIED = re.compile(r"^(.*?) satisfied$")


@dataclass
class Summary:
    """What LoadGen wrote about one run."""

    scenario: str
    mode: str
    valid: bool
    metrics: dict[str, float] = field(default_factory=dict)
    """every numeric figure of the results and additional stats, by LoadGen's own key"""
    percentiles_ns: dict[float, int] = field(default_factory=dict)
    """latency by percentile (50.0, 90.0, 99.0, ...) in ns, LoadGen's additional stats"""
    unmet: list[str] = field(default_factory=list)
    """the constraints LoadGen says were not satisfied (``Min duration``, ``Early stopping``)"""
    notes: list[str] = field(default_factory=list)
    """LoadGen's recommendations and early-stopping lines, and its count of errors"""

    @property
    def completed_qps(self) -> float | None:
        """Completed samples per second (Server), samples per second (Offline) or QPS with
        LoadGen's overhead (SingleStream): the scenario's throughput as LoadGen names it."""
        for key in ("Completed samples per second", "Samples per second"):
            if key in self.metrics:
                return self.metrics[key]
        return self.metrics.get("QPS w/ loadgen overhead")

    @property
    def scheduled_qps(self) -> float | None:
        """The rate LoadGen scheduled (Server only)."""
        return self.metrics.get("Scheduled samples per second")


def parse_summary(text: str) -> Summary:
    """LoadGen's summary text -> :class:`Summary`; BenchError when it has no result line."""
    # after the header the lines echo the settings; only the error count at the end matters
    results, _, parameters = text.partition(PARAMETERS_HEADER)
    fields, notes = _fields_and_notes(results)
    if "Result is" not in fields:
        raise BenchError("LoadGen's summary has no 'Result is' line: the run did not finish")
    numbers = {key: n for key, value in fields.items() if (n := _number(value)) is not None}
    return Summary(
        scenario=fields.get("Scenario", "?"),
        mode=fields.get("Mode", "?"),
        valid=fields["Result is"] == "VALID",
        metrics=numbers,
        percentiles_ns={
            float(match.group(1)): int(value)
            for key, value in numbers.items()
            if (match := _PERCENTILE.match(key)) is not None
        },
        unmet=[
            match.group(1)
            for key, value in fields.items()
            if (match := _SATISFIED.match(key)) is not None and value.lower() == "no"
        ],
        notes=notes + _error_lines(parameters),
    )


def _fields_and_notes(text: str) -> tuple[dict[str, str], list[str]]:
    """The ``key : value`` lines (the first of each key) and the ``* note`` lines."""
    fields: dict[str, str] = {}
    notes: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition(":")
        if line.startswith("*"):
            notes.append(line.lstrip("* "))
        elif not sep and line and notes and raw.startswith(" "):
            notes[-1] += " " + line  # LoadGen wraps a long note onto indented lines
        elif sep and key.strip() and value.strip():
            fields.setdefault(key.strip(), value.strip())
    return fields, notes


def read_summary(folder: Path) -> Summary:
    """Parse ``folder/mlperf_log_summary.txt``, with the messages of LoadGen's errors from its
    detailed log added to the notes; BenchError when LoadGen wrote no summary."""
    path = folder / SUMMARY_FILE
    try:
        text = path.read_text()
    except OSError as exc:
        raise BenchError(f"LoadGen wrote no summary at {path}: {exc}") from None
    summary = parse_summary(text)
    detail = folder / DETAIL_FILE
    if detail.exists():
        summary.notes += detail_errors(detail.read_text(errors="replace"))
    return summary


def detail_errors(text: str) -> list[str]:
    """The messages of the entries LoadGen's detailed log flags ``is_error`` (each once)."""
    errors: list[str] = []
    for line in text.splitlines():
        _, sep, payload = line.partition(":::MLLOG ")
        if not sep or '"is_error": true' not in payload:
            continue
        try:
            message = str(json.loads(payload).get("value", ""))
        except json.JSONDecodeError:
            continue
        if message and message not in errors:
            errors.append(message)
    return errors


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _error_lines(text: str) -> list[str]:
    """LoadGen's counts of its own warnings and errors, unless it says there were none."""
    return [
        line.strip()
        for line in text.splitlines()
        if "encountered" in line and not line.strip().startswith("No ")
    ]
