"""Weighted picks within binomial bounds, sticky keys, canary ramps."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from inferplex.routing.pick import WeightedPicker, key_point


def within_binomial_bound(hits: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """|hits - np| <= sigmas * sqrt(np(1-p)): fails by chance about once in 1.7 million."""
    return abs(hits - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("weights", [[90, 10], [1, 1, 2], [0.5, 0.25, 0.25]])
def test_random_picks_follow_the_weights(weights: list[float]) -> None:
    picker = WeightedPicker(weights, seed=1234)
    n = 20_000
    counts = Counter(picker.pick() for _ in range(n))
    total = sum(weights)
    for index, weight in enumerate(weights):
        assert within_binomial_bound(counts[index], n, weight / total), (index, counts)


def test_a_fixed_seed_repeats_the_sequence() -> None:
    a, b = WeightedPicker([1, 1], seed=7), WeightedPicker([1, 1], seed=7)
    assert [a.pick() for _ in range(100)] == [b.pick() for _ in range(100)]


def test_zero_weight_targets_get_nothing() -> None:
    picker = WeightedPicker([1, 0, 1], seed=0)
    assert 1 not in {picker.pick() for _ in range(5000)}
    assert 1 not in {picker.pick(f"user-{i}") for i in range(5000)}


def test_sticky_keys_always_reach_the_same_target_and_spread_by_weight() -> None:
    picker = WeightedPicker([3, 1], seed=None)
    keys = [f"user-{i}" for i in range(8000)]
    first = [picker.pick(k) for k in keys]
    assert first == [picker.pick(k) for k in keys]
    assert first == [WeightedPicker([3, 1]).pick(k) for k in keys]  # any process, any picker
    assert within_binomial_bound(first.count(1), len(keys), 0.25)


def test_a_canary_ramp_only_moves_keys_onto_the_canary() -> None:
    keys = [f"session-{i}" for i in range(5000)]
    before = {k: WeightedPicker([95, 5]).pick(k) for k in keys}
    after = {k: WeightedPicker([80, 20]).pick(k) for k in keys}
    assert all(after[k] == 1 for k in keys if before[k] == 1)
    assert sum(after.values()) > sum(before.values())


def test_key_points_are_stable_and_in_range() -> None:
    assert key_point("abc") == key_point("abc")
    assert all(0.0 <= key_point(str(i)) < 1.0 for i in range(1000))


def test_bad_weights() -> None:
    with pytest.raises(ValueError, match="add up to more than 0"):
        WeightedPicker([0, 0])
    with pytest.raises(ValueError):
        WeightedPicker([1, -1])
