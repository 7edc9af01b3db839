"""Search space, successive halving, Pareto frontier and the results journal."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from inferplex_tools.benchtool import BenchError
from inferplex_tools.tuner.journal import Journal
from inferplex_tools.tuner.pareto import Point, best_under, frontier, score
from inferplex_tools.tuner.search import rung_count, successive_halving
from inferplex_tools.tuner.space import Candidate, SearchSpace, sample


def test_grid_drops_queue_delays_that_cannot_matter() -> None:
    space = SearchSpace(max_batch_size=[1, 8], queue_delay_us=[0, 100], instances=[1, 2])
    candidates = space.candidates(default_batch=8)
    assert len(candidates) == 2 + 4  # batch 1 keeps delay 0 only
    assert Candidate(1, 0, 2, 1) in candidates and Candidate(1, 100, 2, 1) not in candidates
    assert Candidate(8, 100, 2, 1).key == "b8_d100_i2_t1_fp32"
    assert SearchSpace().candidates(default_batch=4) == [Candidate(4, 0, 1, 1)]


def test_space_checks_name_the_flag() -> None:
    with pytest.raises(BenchError, match="--max-batch-size"):
        SearchSpace(max_batch_size=[0, 8]).check(model_batches=True)
    with pytest.raises(BenchError, match="--max-batch-size"):
        SearchSpace(max_batch_size=[8]).check(model_batches=False)
    with pytest.raises(BenchError, match="--instances"):
        SearchSpace(instances=[0]).check(model_batches=True)
    with pytest.raises(BenchError, match="--precision"):
        SearchSpace(precision=["fp8"]).check(model_batches=True)


def test_sample_is_reproducible_and_bounded() -> None:
    candidates = SearchSpace(max_batch_size=[1, 2, 4, 8, 16], instances=[1, 2, 3]).candidates(8)
    assert sample(candidates, 4, seed=1) == sample(candidates, 4, seed=1)
    assert len(sample(candidates, 4)) == 4
    assert sample(candidates, 0) == candidates


def test_frontier_and_best_under_a_target() -> None:
    points = [
        Point("a", 100, 1.0),
        Point("b", 300, 2.0),
        Point("c", 200, 3.0),
        Point("d", 500, 9.0),
    ]
    assert [p.key for p in frontier(points)] == ["a", "b", "d"]  # c: b is faster and lower
    assert best_under(points, 2.5).key == "b"  # type: ignore[union-attr]
    assert best_under(points, None).key == "d"  # type: ignore[union-attr]
    assert best_under(points, 0.5) is None
    assert score(Point("x", 10, 1.0), 2.0) > score(Point("y", 1000, 3.0), 2.0)


async def test_successive_halving_keeps_the_best_and_measures_it_longer() -> None:
    candidates = SearchSpace(max_batch_size=[1, 2, 4, 8, 16, 32], instances=[1, 2]).candidates(8)
    calls: list[tuple[int, int]] = []

    async def measure(alive: Sequence[Candidate], rung: int) -> dict[Candidate, Point]:
        calls.append((rung, len(alive)))
        # throughput grows with batch and instances; p99 grows with batch
        return {
            c: Point(c.key, c.max_batch_size * 100 + c.instances * 10, c.max_batch_size * 0.5)
            for c in alive
        }

    rungs = await successive_halving(candidates, measure, eta=3)
    # 12 -> 4 -> 2 -> 1: the winner is measured once more at the longest window
    assert calls == [(0, 12), (1, 4), (2, 2), (3, 1)]
    assert rung_count(12, 3) == 4
    assert rungs[-1].kept[0] == Candidate(32, 0, 2, 1)
    limited = await successive_halving(candidates, measure, eta=3, target_ms=4.0)
    assert limited[-1].kept[0] == Candidate(8, 0, 2, 1)  # the best with p99 <= 4 ms
    with pytest.raises(ValueError, match="eta"):
        await successive_halving(candidates, measure, eta=1)


def test_journal_resumes_only_the_same_workload(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    journal = Journal.open(path, {"concurrency": 8})
    assert journal.resumed == 0
    journal.add({"model": "m", "candidate_key": "b8", "rung": 0, "throughput": 5.0})
    again = Journal.open(path, {"concurrency": 8})
    assert again.resumed == 1
    assert again.get("m", "b8", 0)["throughput"] == 5.0  # type: ignore[index]
    assert again.get("m", "b8", 1) is None
    assert Journal.open(path, {"concurrency": 16}).resumed == 0
    path.write_text("not json\n")
    with pytest.raises(BenchError, match=r"results\.jsonl:1"):
        Journal.open(path, {})


def test_settle_puts_a_candidate_without_batching_on_the_grid() -> None:
    space = SearchSpace(max_batch_size=[1, 8], queue_delay_us=[100, 500])
    assert space.settle(Candidate(1, 0, 1, 0)) == Candidate(1, 100, 1, 0)
    assert space.settle(Candidate(8, 0, 1, 0)) == Candidate(8, 0, 1, 0)
