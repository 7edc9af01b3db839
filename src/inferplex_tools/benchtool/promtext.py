"""A small parser of the Prometheus text exposition format (what ``/metrics`` serves).

Enough for scraped samples: ``name{label="value",...} value [timestamp]`` lines, comments
skipped, label values unescaped. Histogram buckets and summaries come out as plain samples.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Sample(NamedTuple):
    """One sample line: ``name{labels} value``."""

    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition; ValueError names a line that cannot be read."""
    samples: list[Sample] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(_sample(line))
        except (ValueError, IndexError):
            raise ValueError(f"metrics line {number}: cannot parse {line[:120]!r}") from None
    return samples


def _sample(line: str) -> Sample:
    brace = line.find("{")
    labels: dict[str, str] = {}
    if brace >= 0:
        name = line[:brace]
        rest = _labels(line, brace + 1, labels)
    else:
        name, _, rest = line.partition(" ")
    value = rest.split()[0]
    return Sample(name.strip(), labels, _float(value))


def _labels(line: str, pos: int, labels: dict[str, str]) -> str:
    """Read ``key="value",...}`` from ``pos``; returns what follows the closing brace."""
    while True:
        while line[pos] in " ,":
            pos += 1
        if line[pos] == "}":
            return line[pos + 1 :]
        equals = line.index("=", pos)
        key = line[pos:equals].strip()
        if line[equals + 1] != '"':
            raise ValueError("label value not quoted")
        pos = equals + 2
        value: list[str] = []
        while line[pos] != '"':
            if line[pos] == "\\":
                pos += 1
                value.append({"n": "\n"}.get(line[pos], line[pos]))
            else:
                value.append(line[pos])
            pos += 1
        labels[key] = "".join(value)
        pos += 1


def _float(text: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    return special[text] if text in special else float(text)
