import pytest

from inferplex.core.estimator import ExecutionEstimator


def test_nothing_known_yet() -> None:
    assert ExecutionEstimator().estimate(4) is None


def test_observed_size_uses_its_smoothed_mean() -> None:
    estimator = ExecutionEstimator(smoothing=0.5)
    estimator.observe(8, 1.0)
    estimator.observe(8, 2.0)
    assert estimator.estimate(8) == pytest.approx(1.5)


def test_single_size_scales_per_row() -> None:
    estimator = ExecutionEstimator()
    estimator.observe(4, 0.004)
    assert estimator.estimate(8) == pytest.approx(0.008)


def test_unseen_sizes_follow_the_fitted_line() -> None:
    estimator = ExecutionEstimator()
    for rows in (1, 2, 4, 8):
        estimator.observe(rows, 0.001 + 0.0005 * rows)
    assert estimator.estimate(16) == pytest.approx(0.009)
    assert estimator.estimate(3) == pytest.approx(0.0025)


def test_line_never_goes_negative() -> None:
    estimator = ExecutionEstimator()
    estimator.observe(1, 0.010)
    estimator.observe(32, 0.001)  # noisy: bigger batch measured faster
    assert estimator.estimate(64) == pytest.approx(estimator.estimate(2), abs=0.02)
    assert estimator.estimate(64) >= 0


def test_smoothing_is_validated() -> None:
    with pytest.raises(ValueError):
        ExecutionEstimator(smoothing=0)
