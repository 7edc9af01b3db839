"""Per-model resource series from a JSONL file of ``/metrics`` scrapes.

Each line is ``{"time": <unix s>, "samples": [[name, {labels}, value], ...]}`` (what the
bench's :class:`~inferplex_tools.benchtool.recorder.MetricsRecorder` writes). Between two scrapes:

- **compute** (cores busy): the growth of the model's cumulative compute time (Triton's
  ``nv_inference_compute_{input,infer,output}_duration_us``) per second of wall time;
  1.0 = one core busy all the time. Each request is charged its batch's compute, as Triton
  does, so batched requests count their batch once per request;
- **requests/s**: the growth of ``nv_inference_request_success``;
- **memory** (MiB): the latest value of any gauge with a ``model`` label and ``memory`` in
  its name (e.g. a per-model memory gauge), when the server exports one.

Counters are summed over versions; a counter that went down (the server restarted) counts
from zero again, as Prometheus' ``rate`` does.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPUTE_COUNTERS = (
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)
REQUEST_COUNTER = "nv_inference_request_success"


class HeatmapError(Exception):
    """The input cannot be rendered; the message names the file and what was expected."""


@dataclass
class Scrape:
    time: float
    counters: dict[str, dict[str, float]]
    """metric -> model -> value summed over versions"""
    memory: dict[str, float]
    """model -> bytes"""


@dataclass
class Panel:
    """One heat map: a value per model (row) and interval (column)."""

    title: str
    unit: str
    models: list[str]
    values: list[list[float]]
    """``values[row][column]``"""


@dataclass
class Series:
    """The time edges of the intervals (seconds since the first scrape) and the panels."""

    edges: list[float]
    panels: list[Panel] = field(default_factory=list)


def read_scrapes(path: Path) -> list[Scrape]:
    """Every scrape in the file, in time order; HeatmapError for an unreadable line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise HeatmapError(f"cannot read {path}: {exc}") from None
    scrapes = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            scrapes.append(_scrape(float(record["time"]), record["samples"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise HeatmapError(
                f"{path}:{number}: expected a JSON object with 'time' and 'samples' "
                f"(written by inferplex bench --record-metrics): {exc}"
            ) from None
    scrapes.sort(key=lambda s: s.time)
    return scrapes


def _scrape(time: float, samples: list[Any]) -> Scrape:
    counters: dict[str, dict[str, float]] = {}
    memory: dict[str, float] = {}
    wanted = {*COMPUTE_COUNTERS, REQUEST_COUNTER}
    for name, labels, value in samples:
        model = labels.get("model")
        if model is None:
            continue
        if name in wanted:
            per_model = counters.setdefault(name, {})
            per_model[model] = per_model.get(model, 0.0) + float(value)
        elif "memory" in name and not name.endswith(("_count", "_sum", "_bucket")):
            memory[model] = memory.get(model, 0.0) + float(value)
    return Scrape(time, counters, memory)


def build(scrapes: list[Scrape]) -> Series:
    """The compute, requests and (when exported) memory panels over the scrapes' intervals."""
    if len(scrapes) < 2:
        raise HeatmapError(
            f"need at least 2 scrapes to measure use over time, got {len(scrapes)}: record "
            "longer or more often (--record-interval)"
        )
    models = sorted(
        {m for s in scrapes for c in s.counters.values() for m in c}
        | {m for s in scrapes for m in s.memory}
    )
    if not models:
        raise HeatmapError("the scrapes hold no per-model samples (no 'model' label)")
    start = scrapes[0].time
    series = Series(edges=[s.time - start for s in scrapes])
    compute = [[0.0] * (len(scrapes) - 1) for _ in models]
    requests = [[0.0] * (len(scrapes) - 1) for _ in models]
    for column, (before, after) in enumerate(itertools.pairwise(scrapes)):
        seconds = after.time - before.time
        if seconds <= 0:
            continue
        for row, model in enumerate(models):
            busy_us = sum(_growth(before, after, name, model) for name in COMPUTE_COUNTERS)
            compute[row][column] = busy_us / 1e6 / seconds
            requests[row][column] = _growth(before, after, REQUEST_COUNTER, model) / seconds
    series.panels.append(Panel("compute (cores busy)", "cores", models, compute))
    series.panels.append(Panel("requests per second", "req/s", models, requests))
    if any(s.memory for s in scrapes):
        memory = [
            [after.memory.get(model, 0.0) / 2**20 for after in scrapes[1:]] for model in models
        ]
        series.panels.append(Panel("memory", "MiB", models, memory))
    return series


def _growth(before: Scrape, after: Scrape, name: str, model: str) -> float:
    old = before.counters.get(name, {}).get(model, 0.0)
    new = after.counters.get(name, {}).get(model, 0.0)
    return new - old if new >= old else new  # a reset: the server restarted


def shares(panel: Panel) -> dict[str, float]:
    """Each model's share of the panel's total over the whole time (0 to 1)."""
    totals = {m: sum(row) for m, row in zip(panel.models, panel.values, strict=True)}
    grand = sum(totals.values())
    return {m: (t / grand if grand else 0.0) for m, t in totals.items()}
