"""Metric families and their Prometheus text exposition (format 0.0.4).

Our own small writer rather than prometheus-client's registry: every value is read from the
engine's counters at scrape time, so there is nothing to register or update per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

Labels = dict[str, str]
Kind = Literal["counter", "gauge", "histogram"]


@dataclass(slots=True)
class HistogramValue:
    """One labelled histogram: per-bucket (not cumulative) counts, the last one +Inf."""

    bounds: tuple[float, ...]
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


def _label_text(labels: Labels) -> str:
    return ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())


def _labels(labels: Labels) -> str:
    return "{" + _label_text(labels) + "}" if labels else ""


@lru_cache(maxsize=16)
def _le_values(bounds: tuple[float, ...]) -> tuple[str, ...]:
    """The ``le`` label values of a histogram's buckets, +Inf last (formatted once)."""
    return (*(_number(b) for b in bounds), "+Inf")


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
            text = _label_text(labels)
            bucket = f'{family.name}_bucket{{{text}{"," if text else ""}le="'
            cumulative = 0
            for le, count in zip(_le_values(hist.bounds), hist.counts, strict=True):
                cumulative += count
                lines.append(f'{bucket}{le}"}} {cumulative}')
            suffix = f"{{{text}}}" if text else ""
            lines.append(f"{family.name}_sum{suffix} {_number(hist.sum)}")
            lines.append(f"{family.name}_count{suffix} {cumulative}")
    return ("\n".join(lines) + "\n").encode()
