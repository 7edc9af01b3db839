import numpy as np
import pytest

from inferplex_tools.optimize.measure import Timing, agreement, speedup, time_interleaved


class FakeClock:
    """Each call to a runner advances time by that runner's cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleaved_rounds_alternate_and_give_medians() -> None:
    clock = FakeClock()
    order: list[str] = []

    def runner(name: str, cost: float):
        def run() -> None:
            order.append(name)
            clock.now += cost

        return run

    result = time_interleaved(
        {"a": runner("a", 0.01), "b": runner("b", 0.02)},
        batch_size=4,
        rounds=3,
        round_s=0.04,
        clock=clock,
    )
    # two warm-up calls each, then per round: 4 calls of a, 2 of b; order a b | b a | a b
    measured = order[4:]
    assert measured == ["a"] * 4 + ["b"] * 2 + ["b"] * 2 + ["a"] * 4 + ["a"] * 4 + ["b"] * 2
    assert result["a"].median_s == pytest.approx(0.01)
    assert result["b"].median_s == pytest.approx(0.02)
    assert result["b"].items_per_s == pytest.approx(200)
    assert result["a"].calls == 12
    assert result["a"].spread == pytest.approx(0.0)


def rounds_of(*medians_ms: float) -> Timing:
    medians = tuple(ms / 1e3 for ms in medians_ms)
    return Timing(32, float(np.median(medians)), max(medians), len(medians), medians)


def test_speedup_pairs_the_rounds() -> None:
    # round 2 ran on a slowed machine for both sides; round 3 only for the candidate
    parent = rounds_of(10.0, 40.0, 10.0, 10.0, 10.0)
    candidate = rounds_of(5.0, 20.0, 20.0, 4.0, 5.0)
    assert speedup(parent, candidate) == pytest.approx(2.0)
    assert parent.median_s / candidate.median_s == pytest.approx(2.0)
    # unpaired medians would be misled by a slow spell that hit one side more often
    slow_parent = rounds_of(10.0, 10.0, 30.0, 30.0, 30.0)
    slow_candidate = rounds_of(5.0, 5.0, 15.0, 15.0, 5.0)
    assert speedup(slow_parent, slow_candidate) == pytest.approx(2.0)
    assert slow_parent.median_s / slow_candidate.median_s == pytest.approx(6.0)


def test_speedup_needs_the_same_rounds() -> None:
    with pytest.raises(ValueError, match="same rounds"):
        speedup(rounds_of(1.0, 1.0), rounds_of(1.0, 1.0, 1.0))


def test_agreement_of_classifier_outputs() -> None:
    parent = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.5], [0.2, 0.1]], dtype=np.float32)
    candidate = parent.copy()
    candidate[3] = [0.1, 0.2]  # flips the top-1 of the last row
    result = agreement(parent, candidate, "logits", np.array([0, 1, 0, 1]))
    assert result.top1_agreement == pytest.approx(0.75)
    assert result.parent_accuracy == pytest.approx(0.75)
    assert result.candidate_accuracy == pytest.approx(1.0)
    assert result.accuracy_drop == pytest.approx(-0.25)
    assert result.cosine_min < result.cosine_mean < 1.0


def test_agreement_of_embeddings_handles_zero_rows() -> None:
    parent = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    candidate = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    result = agreement(parent, candidate, "embedding", None)
    assert result.cosine_min == 0.0
    assert result.cosine_mean == pytest.approx(2 / 3)
    assert result.parent_accuracy is None
