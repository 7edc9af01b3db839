"""--find-peak's search against a fake "LoadGen run at qps -> VALID/INVALID"."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inferplex_tools.benchtool.mlperf_peak import MAX_HALVING, Probe, find_peak


def fake(limit: float, asked: list[float]) -> Callable[[float], bool]:
    """A fake LoadGen run, VALID up to ``limit`` QPS, noting each QPS asked in ``asked``."""

    def probe(qps: float) -> bool:
        asked.append(qps)
        return qps <= limit

    return probe


def test_doubles_while_valid_then_bisects() -> None:
    asked: list[float] = []
    search = find_peak(fake(730, asked), 100, tolerance=0.05)
    assert asked[:4] == [100, 200, 400, 800]  # bracket: 400 VALID, 800 INVALID
    assert asked[4:] == [600, 700, 750, 725]
    assert search.peak == 725
    assert search.probes[3] == Probe(800, False)
    # the bracket it stopped at is within the tolerance of its lower end
    assert 750 - 725 <= 0.05 * 725 < 750 - 700


def test_halves_while_invalid() -> None:
    asked: list[float] = []
    search = find_peak(fake(30, asked), 100, tolerance=0.5)
    assert asked == [100, 50, 25, 37.5]
    assert search.peak == 25
    assert [p.valid for p in search.probes] == [False, False, True, False]


def test_max_probes_and_the_floor_bound_the_search() -> None:
    asked: list[float] = []
    search = find_peak(fake(0, asked), 100, max_probes=3)
    assert asked == [100, 50, 25]
    assert search.peak is None
    asked.clear()
    search = find_peak(fake(0, asked), 160)  # never VALID: down to 160 / MAX_HALVING
    assert asked == [160, 80, 40, 20, 10] and asked[-1] == 160 / MAX_HALVING
    assert search.peak is None
    asked.clear()
    search = find_peak(fake(1e9, asked), 100, max_probes=4)
    assert asked == [100, 200, 400, 800]  # never INVALID: the highest probe is the peak
    assert search.peak == 800


@pytest.mark.parametrize(
    "start,tolerance,max_probes", [(0, 0.05, 12), (100, 0, 12), (100, 0.05, 0)]
)
def test_bad_search_settings(start: float, tolerance: float, max_probes: int) -> None:
    with pytest.raises(ValueError):
        find_peak(lambda qps: True, start, tolerance=tolerance, max_probes=max_probes)
