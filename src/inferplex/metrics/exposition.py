"""Metric families and their Prometheus text exposition (format 0.0.4).

Our own small writer rather than prometheus-client's registry: every value is read from the
engine's counters at scrape time, so there is nothing to register or update per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Labels = dict[str, str]
Kind = Literal["counter", "gauge", "histogram"]


@dataclass(slots=True)
class HistogramValue:
    """One labelled histogram: per-bucket (not cumulative) counts, the last one +Inf."""

    bounds: Sequence[float]
    counts: Sequence[int]
    sum: float


@dataclass
class Family:
    """All samples of one metric name."""

    name: str
    kind: Kind
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    histograms: list[tuple[Labels, HistogramValue]] = field(default_factory=list)

    def add(self, labels: Labels, value: float) -> None:
        self.samples.append((labels, value))

    def add_histogram(self, labels: Labels, value: HistogramValue) -> None:
        self.histograms.append((labels, value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels, extra: str = "") -> str:
    parts = [f'{key}="{_escape(val)}"' for key, val in labels.items()]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value))


def render(families: list[Family]) -> bytes:
    """The families in Prometheus text format; a family without samples is left out."""
    lines: list[str] = []
    for family in families:
        if not family.samples and not family.histograms:
            continue
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            lines.append(f"{family.name}{_labels(labels)} {_number(value)}")
        for labels, hist in family.histograms:
            cumulative = 0
            for bound, count in zip([*hist.bounds, float("inf")], hist.counts, strict=True):
                cumulative += count
                le = f'le="{_number(bound)}"'
                lines.append(f"{family.name}_bucket{_labels(labels, le)} {cumulative}")
            lines.append(f"{family.name}_sum{_labels(labels)} {_number(hist.sum)}")
            lines.append(f"{family.name}_count{_labels(labels)} {cumulative}")
    return ("\n".join(lines) + "\n").encode()
