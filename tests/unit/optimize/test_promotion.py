import pytest

from inferplex.errors import InvalidInputError
from inferplex_tools.optimize.measure import Agreement, Timing
from inferplex_tools.optimize.promotion import Thresholds, failures, resolve_task


def timing(batch: int, ms: float) -> Timing:
    return Timing(batch, ms / 1e3, ms / 1e3, 10, (ms / 1e3,) * 3)


def agreement(
    cosine: float = 1.0, top1: float | None = 1.0, accuracies: tuple[float, float] | None = None
) -> Agreement:
    parent, candidate = accuracies or (None, None)
    return Agreement("out", 100, cosine, cosine, top1, parent, candidate)


FAST = {1: (timing(1, 2.0), timing(1, 1.0)), 32: (timing(32, 40.0), timing(32, 20.0))}


def test_faster_and_accurate_is_promoted() -> None:
    assert failures(FAST, agreement(accuracies=(0.97, 0.965)), "classification", Thresholds()) == []


def test_slower_at_any_batch_size_is_not_promoted() -> None:
    timings = {1: (timing(1, 1.0), timing(1, 1.25)), 32: FAST[32]}
    reasons = failures(timings, agreement(), "embedding", Thresholds())
    assert len(reasons) == 1
    assert reasons[0].startswith("slower than FP32 at batch 1: 0.800x")


def test_speed_threshold_is_settable() -> None:
    reasons = failures(FAST, agreement(), "embedding", Thresholds(min_speedup=2.5))
    assert [r.split(":")[0] for r in reasons] == [
        "not enough faster than FP32 at batch 1",
        "not enough faster than FP32 at batch 32",
    ]
    assert failures(FAST, agreement(), "embedding", Thresholds(min_speedup=2.0)) == []


def test_accuracy_drop_with_labels() -> None:
    lost = agreement(accuracies=(0.97, 0.955))
    (reason,) = failures(FAST, lost, "classification", Thresholds())
    assert "less accurate: 95.50% vs 97.00%" in reason
    assert "drop 1.50 points" in reason
    assert failures(FAST, lost, "classification", Thresholds(max_accuracy_drop=0.02)) == []


def test_classifier_without_labels_needs_top1_agreement() -> None:
    (reason,) = failures(FAST, agreement(top1=0.95), "classification", Thresholds())
    assert "top-1 agreement with FP32 95.00%" in reason
    (reason,) = failures(FAST, agreement(top1=None), "classification", Thresholds())
    assert "n/a" in reason


def test_embedder_needs_cosine() -> None:
    (reason,) = failures(FAST, agreement(cosine=0.95), "embedding", Thresholds())
    assert "cosine similarity to FP32 0.950000" in reason
    assert failures(FAST, agreement(cosine=0.95), "embedding", Thresholds(min_cosine=0.9)) == []
    (close,) = failures(FAST, agreement(cosine=0.99996), "embedding", Thresholds(min_cosine=1.0))
    assert "0.999960 (mean); needed >= 1" in close  # never "1.0000 ... needed >= 1.0000"


@pytest.mark.parametrize(
    ("field", "value"),
    [("min_speedup", -3.0), ("max_accuracy_drop", -0.5), ("min_agreement", 1.5)],
)
def test_thresholds_out_of_range_are_refused(field: str, value: float) -> None:
    with pytest.raises(InvalidInputError, match=f"{field} must be"):
        Thresholds(**{field: value})


@pytest.mark.parametrize(
    ("task", "labels", "expected"),
    [
        ("auto", True, "classification"),
        ("auto", False, "embedding"),
        ("classification", False, "classification"),
        ("embedding", True, "embedding"),
    ],
)
def test_task_resolution(task: str, labels: bool, expected: str) -> None:
    assert resolve_task(task, labels) == expected  # type: ignore[arg-type]


def test_a_ratio_just_under_the_threshold_does_not_print_as_the_threshold() -> None:
    timings = {1: (timing(1, 1.0), timing(1, 1.005))}
    reasons = failures(timings, agreement(), "embedding", Thresholds())
    assert "0.995x the speed" in reasons[0] and "needed >= 1.00x" in reasons[0]
