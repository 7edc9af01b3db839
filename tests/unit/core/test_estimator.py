import pytest

from inferplex.core.estimator import ExecutionEstimator


def test_nothing_known_yet() -> None:
    assert ExecutionEstimator().estimate(4) is None


def test_observed_size_uses_its_smoothed_mean() -> None:
    estimator = ExecutionEstimator(smoothing=0.5)
    estimator.observe(8, 1.0)
    estimator.observe(8, 2.0)
    estimator.observe(8, 3.0)
    assert estimator.estimate(8) == pytest.approx(2.5)


def test_a_size_s_first_run_is_replaced_by_its_second() -> None:
    """A fresh ONNX Runtime session's first add_sub run took 254 µs, the next ones 6-13 µs:
    blended, the first would hold the estimate up for about ten batches."""
    estimator = ExecutionEstimator(smoothing=0.2)
    estimator.observe(1, 254e-6)
    assert estimator.estimate(1) == pytest.approx(254e-6)
    estimator.observe(1, 13e-6)
    assert estimator.estimate(1) == pytest.approx(13e-6)
    estimator.observe(1, 8e-6)
    assert estimator.estimate(1) == pytest.approx(12e-6)
    estimator.observe(4, 1e-3)  # another size starts provisional on its own
    estimator.observe(4, 2e-5)
    assert estimator.estimate(4) == pytest.approx(2e-5)


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
