"""Custom metrics in the worker: what a model records, and the updates drained for the
server (which adds them up: tests/unit/backends/worker/test_model_metrics.py)."""

from __future__ import annotations

import pytest

from inferplex.handler import metrics
from inferplex.handler.metrics import MetricFamily


@pytest.fixture(autouse=True)
def drained() -> None:
    metrics.drain()


def test_a_counter_sends_what_was_added_since_the_last_drain() -> None:
    family = MetricFamily("t_counter", "help text", MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m", "version": "1"})
    labels = (("model", "m"), ("version", "1"))
    assert metrics.drain() == [("counter", "t_counter", "help text", labels, 0.0)]  # shown at 0
    assert metrics.drain() == []  # nothing changed: nothing to send
    metric.increment(2)
    metric.increment(3.5)
    assert metric.value() == 5.5
    assert metrics.drain() == [("counter", "t_counter", "help text", labels, 5.5)]
    metric.increment(1)
    assert metrics.drain() == [("counter", "t_counter", "help text", labels, 1.0)]
    assert metric.value() == 6.5
    with pytest.raises(ValueError, match="cannot decrease"):
        metric.increment(-1)
    with pytest.raises(ValueError, match="only for a GAUGE"):
        metric.set(1)


def test_a_gauge_sends_its_last_set_and_what_was_added_after() -> None:
    metric = MetricFamily("t_gauge", "g", MetricFamily.GAUGE).Metric()
    metrics.drain()
    metric.increment(5)
    metric.set(10)
    metric.increment(-2)
    assert metric.value() == 8
    assert metrics.drain() == [("gauge", "t_gauge", "g", (), 10.0, -2.0)]
    metric.increment(1)
    assert metrics.drain() == [("gauge", "t_gauge", "g", (), None, 1.0)]


def test_a_histogram_sends_bucket_counts() -> None:
    family = MetricFamily("t_hist", "h", MetricFamily.HISTOGRAM)
    with pytest.raises(ValueError, match="buckets are required"):
        family.Metric()
    metric = family.Metric(buckets=[10, 1])
    metrics.drain()
    for value in (0.5, 1, 3, 50):
        metric.observe(value)
    assert metrics.drain() == [("histogram", "t_hist", "h", (), (1.0, 10.0), [2, 1, 1], 54.5)]
    with pytest.raises(ValueError, match="no single value"):
        metric.value()
    with pytest.raises(ValueError, match="takes observe"):
        metric.increment(1)


def test_families_of_one_name_are_one() -> None:
    first = MetricFamily("t_shared", "first", MetricFamily.COUNTER)
    second = MetricFamily("t_shared", "second", MetricFamily.COUNTER)
    assert second.description == "first"
    assert first.Metric(labels={"a": "1"}) is second.Metric(labels={"a": "1"})
    with pytest.raises(ValueError, match="already exists with kind COUNTER"):
        MetricFamily("t_shared", "x", MetricFamily.GAUGE)


@pytest.mark.parametrize("name", ["nv_inference_count", "inferplex_x", "bad-name", "1x"])
def test_names_the_server_uses_or_prometheus_refuses_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="must match"):
        MetricFamily(name, "x", MetricFamily.COUNTER)


def test_labels_must_be_prometheus_labels_with_str_values() -> None:
    family = MetricFamily("t_labels", "x", MetricFamily.COUNTER)
    with pytest.raises(ValueError, match="needs a name matching"):
        family.Metric(labels={"bad-key": "v"})
    with pytest.raises(ValueError, match="needs a name matching"):
        family.Metric(labels={"version": 1})  # type: ignore[dict-item]
