"""Histogram buckets of core/stats.py and their exposition."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from inferplex.core.stats import LATENCY_BOUNDS_NS, Histogram, ModelStats
from inferplex.metrics.exposition import Family, HistogramValue, render
from inferplex.metrics.sampler import histogram_quantile


def test_a_value_equal_to_a_bound_falls_in_that_bucket_like_prometheus_le() -> None:
    hist = Histogram((10, 20))
    for value in (0, 10, 11, 20, 21, 10**9):
        hist.observe(value)
    assert hist.counts == [2, 2, 2]
    assert hist.sum == 0 + 10 + 11 + 20 + 21 + 10**9


def test_stats_observe_successes_queue_waits_and_compute_phases() -> None:
    stats = ModelStats("m", "1")
    stats.record_request(True, 300_000)  # 0.3 ms
    stats.record_request(False, 7)  # failures stay out of the latency histogram
    stats.record_batch(2, 1_000_000, [400_000, 900_000], 10, 2_000_000, 30)
    assert sum(stats.request_hist.counts) == 1
    assert stats.request_hist.counts[LATENCY_BOUNDS_NS.index(500_000)] == 1
    queue = stats.queue_hist
    assert sum(queue.counts) == 2 and queue.sum == 600_000 + 100_000
    assert [sum(h.counts) for h in stats.compute_hists] == [1, 1, 1]
    assert stats.phases["queue"].ns == 700_000


def test_exposition_is_cumulative_and_parses() -> None:
    family = Family("x_seconds", "histogram", "test")
    family.add_histogram({"model": 'a"b'}, HistogramValue((0.1, 1.0), [1, 0, 2], 5.5))
    text = render([family]).decode()
    assert 'x_seconds_bucket{model="a\\"b",le="0.1"} 1' in text
    assert 'x_seconds_bucket{model="a\\"b",le="1.0"} 1' in text
    assert 'x_seconds_bucket{model="a\\"b",le="+Inf"} 3' in text
    (parsed,) = text_string_to_metric_families(text)
    assert parsed.type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in parsed.samples}
    assert samples[("x_seconds_count", None)] == 3
    assert samples[("x_seconds_sum", None)] == 5.5


def test_a_family_without_samples_is_left_out() -> None:
    assert render([Family("empty", "gauge", "nothing")]) == b"\n"


def test_quantile_interpolates_inside_the_bucket() -> None:
    bounds = (10, 20, 40)
    assert histogram_quantile(0.5, [0, 0, 0, 0], bounds) is None
    # 10 observations in (10, 20]: the median is half-way through that bucket
    assert histogram_quantile(0.5, [0, 10, 0, 0], bounds) == 15
    # everything above the last bound: the last finite bound, as Prometheus answers
    assert histogram_quantile(0.99, [0, 0, 0, 5], bounds) == 40
    assert histogram_quantile(0.25, [4, 4, 0, 0], bounds) == 5
