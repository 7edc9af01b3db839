"""The server's side of the custom metrics Python models define (``inferplex.handler.metrics``,
Triton's ``pb_utils.MetricFamily``): the update records workers send with their answers are
added up here, and the metrics port reads them at each scrape.

One table per server process (``MODEL_METRICS``): models share a family by its name, as in
Triton, and every instance's worker adds to the same series. A record whose kind differs
from the family's first is dropped with a warning.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int]  # per bucket, the last one +Inf
    sum: float = 0.0


@dataclass(slots=True)
class FamilyValues:
    """One custom family: its values by labels (a float, or a Histogram)."""

    name: str
    kind: str
    description: str
    values: dict[Labels, float | Histogram] = field(default_factory=dict)


class ModelMetrics:
    """The custom families of every model, as the workers' updates left them."""

    def __init__(self) -> None:
        self._families: dict[str, FamilyValues] = {}
        # updates come from instance threads, reads from the event loop (a scrape)
        self._lock = threading.Lock()

    def apply(self, updates: Iterable[tuple[Any, ...]]) -> None:
        with self._lock:
            for kind, name, description, labels, *change in updates:
                family = self._families.get(name)
                if family is None:
                    family = self._families[name] = FamilyValues(name, kind, description)
                elif family.kind != kind:
                    logger.warning(
                        "custom metric '%s' is a %s; an update as a %s was dropped",
                        name,
                        family.kind,
                        kind,
                    )
                    continue
                _apply(family, tuple(map(tuple, labels)), change)

    def families(self) -> list[FamilyValues]:
        """A copy of the families, for a scrape."""
        with self._lock:
            return [
                FamilyValues(
                    f.name,
                    f.kind,
                    f.description,
                    {
                        k: Histogram(v.bounds, list(v.counts), v.sum)
                        if isinstance(v, Histogram)
                        else v
                        for k, v in f.values.items()
                    },
                )
                for f in self._families.values()
            ]


def _apply(family: FamilyValues, labels: Labels, change: list[Any]) -> None:
    current = family.values.get(labels)
    if family.kind == "histogram":
        bounds, counts, total = change
        if not isinstance(current, Histogram) or current.bounds != tuple(bounds):
            # a new series (or new buckets, after a model reload): start over
            current = family.values[labels] = Histogram(tuple(bounds), [0] * len(counts))
        current.counts = [a + b for a, b in zip(current.counts, counts, strict=True)]
        current.sum += total
        return
    value = current if isinstance(current, float) else 0.0
    if family.kind == "gauge":
        assigned, delta = change
        value = (value if assigned is None else assigned) + delta
    else:
        value += change[0]
    family.values[labels] = value


#: the server process's table (workers' updates arrive through WorkerProcess.receive)
MODEL_METRICS = ModelMetrics()
