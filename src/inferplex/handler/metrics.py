"""Custom metrics a Python model defines (Triton's ``pb_utils.MetricFamily`` / ``Metric``),
exported on the server's ``/metrics`` next to its own::

    family = pb_utils.MetricFamily("preprocess_ns", "Time spent pre-processing",
                                   pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(elapsed)

The model runs in a worker process, so an update is only recorded here, under a lock, with no
message: what changed since the last time travels to the server in one message just before
the worker's answer to the batch (and before "ready", for what ``initialize`` made),
``drain()`` builds it. The server adds it up (``backends/worker/model_metrics.py``).
``value()`` reads this worker's own view: for a counter, what this instance added; for a
gauge, its last value here.

Update records (tuples, sent as one list):

* ``("counter", name, description, labels, delta)``
* ``("gauge", name, description, labels, value_set_or_None, delta_after)``
* ``("histogram", name, description, labels, bounds, per_bucket_count_deltas, sum_delta)``

``labels`` is a tuple of sorted (key, value) pairs; a histogram's counts are per bucket, the
last one +Inf.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

#: Prometheus' metric name rule; ``nv_`` and ``inferplex_`` are the server's own families
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_RESERVED = ("nv_", "inferplex_")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_lock = threading.Lock()
#: name -> family, so a second MetricFamily of the same name shares the first (as Triton's)
_families: dict[str, MetricFamily] = {}
#: metrics updated (or made) since the last drain
_dirty: dict[int, Metric] = {}


class MetricFamily:
    """A metric name with its description and kind; its ``Metric``s carry the labels."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"

    name: str
    description: str
    kind: str

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise ValueError(f"metric family '{name}': kind must be COUNTER, GAUGE or HISTOGRAM")
        if not _NAME.fullmatch(name) or name.startswith(_RESERVED):
            raise ValueError(
                f"metric family name '{name}' must match [a-zA-Z_:][a-zA-Z0-9_:]* and not "
                f"start with {' or '.join(_RESERVED)} (the server's own metrics)"
            )
        with _lock:
            known = _families.get(name)
            if known is not None and known.kind != kind:
                raise ValueError(
                    f"metric family '{name}' already exists with kind {known.kind.upper()}"
                )
            if known is None:
                _families[name] = self
                self._metrics: dict[tuple[tuple[str, str], ...], Metric] = {}
            else:  # the first one's description and metrics stay, as in Triton
                description = known.description
                self._metrics = known._metrics
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(
        self, labels: Mapping[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """The metric of these labels (the same object for the same labels)."""
        key = _label_key(self.name, labels or {})
        if (buckets is not None) != (self.kind == self.HISTOGRAM):
            raise ValueError(
                f"metric family '{self.name}': buckets are required for a HISTOGRAM and "
                "allowed for no other kind"
            )
        with _lock:
            metric = self._metrics.get(key)
            if metric is None:
                metric = self._metrics[key] = Metric(self, key, buckets)
                _dirty[id(metric)] = metric  # shown (at zero) from now on
            return metric


class Metric:
    """One labelled series: ``increment`` (counter, gauge), ``set`` (gauge), ``observe``
    (histogram), ``value`` (counter, gauge)."""

    def __init__(
        self,
        family: MetricFamily,
        labels: tuple[tuple[str, str], ...],
        buckets: Sequence[float] | None,
    ) -> None:
        self._family = family
        self._labels = labels
        self._bounds = tuple(sorted(float(b) for b in buckets or ()))
        self._value = 0.0  # this worker's view
        self._set: float | None = None  # a gauge's last set() since the last drain
        self._delta = 0.0  # added since the last drain (after _set)
        self._counts = [0] * (len(self._bounds) + 1)

    def increment(self, value: float) -> None:
        kind = self._family.kind
        if kind == MetricFamily.HISTOGRAM:
            raise ValueError(f"metric '{self._family.name}': a HISTOGRAM takes observe()")
        if kind == MetricFamily.COUNTER and value < 0:
            raise ValueError(f"metric '{self._family.name}': a COUNTER cannot decrease")
        with _lock:
            self._value += value
            self._delta += value
            _dirty[id(self)] = self

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise ValueError(f"metric '{self._family.name}': set() is only for a GAUGE")
        with _lock:
            self._value = self._set = float(value)
            self._delta = 0.0
            _dirty[id(self)] = self

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise ValueError(f"metric '{self._family.name}': observe() is only for a HISTOGRAM")
        index = next((i for i, b in enumerate(self._bounds) if value <= b), len(self._bounds))
        with _lock:
            self._counts[index] += 1
            self._delta += value
            _dirty[id(self)] = self

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise ValueError(f"metric '{self._family.name}': a HISTOGRAM has no single value")
        return self._value

    def _take(self) -> tuple[Any, ...]:
        """The update record of what changed since the last drain (under the lock)."""
        family = self._family
        head = (family.kind, family.name, family.description, self._labels)
        delta, self._delta = self._delta, 0.0
        if family.kind == MetricFamily.COUNTER:
            return (*head, delta)
        if family.kind == MetricFamily.GAUGE:
            assigned, self._set = self._set, None
            return (*head, assigned, delta)
        counts, self._counts = self._counts, [0] * len(self._counts)
        return (*head, self._bounds, counts, delta)


def drain() -> list[tuple[Any, ...]]:
    """The update records of every metric changed since the last call (the worker sends
    them to the server); empty when nothing changed."""
    if not _dirty:  # read without the lock: a race only delays an update to the next drain
        return []
    with _lock:
        changed = list(_dirty.values())
        _dirty.clear()
        return [metric._take() for metric in changed]


def _label_key(family: str, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    for key, value in labels.items():
        if not isinstance(value, str) or not _LABEL.fullmatch(key) or key == "le":
            raise ValueError(
                f"metric family '{family}': label {key!r}={value!r} needs a name matching "
                "[a-zA-Z_][a-zA-Z0-9_]* (not 'le') and a str value"
            )
    return tuple(sorted(labels.items()))
