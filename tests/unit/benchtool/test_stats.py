"""Percentiles, windows and the stability rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex_tools.benchtool.stats import Window, is_stable, merge, summarize


def test_summary_matches_numpy_percentiles() -> None:
    latencies = [i * 1_000_000 for i in range(1, 101)]  # 1..100 ms
    summary = summarize(latencies, seconds=2.0)
    assert summary.requests == 100
    assert summary.throughput == 50.0
    assert summary.min_ms == 1.0 and summary.max_ms == 100.0
    assert summary.mean_ms == pytest.approx(50.5)
    for q, value in ((50, summary.p50_ms), (90, summary.p90_ms), (99, summary.p99_ms)):
        assert value == pytest.approx(np.percentile(np.arange(1, 101), q))


def test_empty_summary_has_no_latency_and_zero_throughput() -> None:
    summary = summarize([], seconds=1.0)
    assert summary.requests == 0 and summary.throughput == 0.0
    assert math.isnan(summary.p99_ms)


def test_summary_needs_a_positive_duration() -> None:
    with pytest.raises(ValueError, match="seconds must be > 0"):
        summarize([1], seconds=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=10**10), min_size=1, max_size=200))
def test_percentiles_are_ordered(latencies: list[int]) -> None:
    s = summarize(latencies, 1.0)
    assert s.min_ms <= s.p50_ms <= s.p90_ms <= s.p95_ms <= s.p99_ms <= s.max_ms


def _window(requests: int, latency_ms: float, seconds: float = 1.0) -> Window:
    return Window([int(latency_ms * 1e6)] * requests, seconds)


def test_stable_when_the_last_windows_agree() -> None:
    windows = [_window(10, 9.0), _window(100, 1.0), _window(104, 1.02), _window(98, 0.99)]
    assert is_stable(windows, tolerance=0.1, count=3)
    assert not is_stable(windows, tolerance=0.1, count=4)  # the first window disagrees


def test_unstable_when_throughput_or_latency_moves() -> None:
    assert not is_stable([_window(100, 1.0), _window(100, 1.0), _window(130, 1.0)], 0.1)
    assert not is_stable([_window(100, 1.0), _window(100, 1.0), _window(100, 1.5)], 0.1)


def test_too_few_or_empty_windows_are_not_stable() -> None:
    assert not is_stable([_window(100, 1.0), _window(100, 1.0)], 0.1, count=3)
    assert not is_stable([_window(0, 1.0)] * 3, 0.1)


def test_tolerance_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tolerance must be > 0"):
        is_stable([_window(1, 1.0)] * 3, 0)


def test_merge_adds_seconds_and_latencies() -> None:
    merged = merge([_window(10, 1.0, 0.5), _window(30, 3.0, 1.5)])
    assert merged.requests == 40
    assert merged.seconds == 2.0
    assert merged.throughput == 20.0
    assert merged.p50_ms == 3.0
