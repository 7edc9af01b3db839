import pytest

from inferplex.core.adaptive import HEADROOM, MIN_SHARE, RELEASE, SloGuard, plan_limits
from inferplex.core.estimator import ExecutionEstimator


def linear(fixed: float, per_row: float) -> ExecutionEstimator:
    estimator = ExecutionEstimator()
    for rows in (1, 4, 16, 32):
        estimator.observe(rows, fixed + per_row * rows)
    return estimator


def test_nothing_measured_keeps_the_config() -> None:
    assert plan_limits(ExecutionEstimator(), 0.05, 32, 0.001) is None


def test_largest_batch_whose_worst_case_fits_the_target() -> None:
    # 1 ms fixed + 0.5 ms per row; target 20 ms -> budget 16 ms -> 2 x exec <= 16 -> rows <= 14
    limits = plan_limits(linear(0.001, 0.0005), 0.020, 32, 0.0)
    assert limits is not None
    assert limits.max_rows == 14
    assert 2 * (0.001 + 0.0005 * 14) + limits.max_delay_s == pytest.approx(0.020 * HEADROOM)


def test_generous_target_uses_the_whole_batch_and_the_configured_delay() -> None:
    limits = plan_limits(linear(0.001, 0.0001), 1.0, 32, 0.002)
    assert limits is not None
    assert (limits.max_rows, limits.max_delay_s) == (32, 0.002)


def test_impossible_target_still_runs_single_requests_without_waiting() -> None:
    limits = plan_limits(linear(0.010, 0.001), 0.005, 32, 0.001)
    assert limits is not None
    assert (limits.max_rows, limits.max_delay_s) == (1, 0.0)


def test_adaptive_batching_replans_the_batcher_every_few_batches() -> None:
    from inferplex.config.model_config import DynamicBatching
    from inferplex.core.adaptive import REPLAN_EVERY, AdaptiveBatching
    from inferplex.core.batcher import DynamicBatcher

    estimator = linear(0.001, 0.0005)
    batcher = DynamicBatcher("m", 32, DynamicBatching(), estimator.estimate)
    adaptive = AdaptiveBatching(batcher, estimator, 0.020, 32, 0.0)
    for _ in range(REPLAN_EVERY - 1):
        adaptive.batch_done()
    assert batcher.limits == (32, 0.0)  # not yet
    adaptive.batch_done()
    rows, delay = batcher.limits
    assert rows == 14
    assert 2 * (0.001 + 0.0005 * 14) + delay == pytest.approx(0.020 * HEADROOM)


def test_adaptive_batching_needs_a_latency_target() -> None:
    from pydantic import ValidationError

    from inferplex.config.model_config import Scheduling

    with pytest.raises(ValidationError, match="slo_p99_ms"):
        Scheduling(adaptive_batching=True)
    assert Scheduling(adaptive_batching=True, slo_p99_ms=50).adaptive_batching


# --- the SLO guard ---------------------------------------------------------------------------


def test_slo_guard_halves_the_share_above_the_aim_holds_near_it_and_gives_it_back_under() -> None:
    guard = SloGuard(capacity=1)
    assert not guard.pacing
    guard.steer(1.2, aim=0.9, well_under=0.7)
    assert guard.share == 0.5 and guard.pacing
    guard.steer(0.8, aim=0.9, well_under=0.7)  # under the aim, not well under: hold
    assert guard.share == 0.5
    for _ in range(20):
        guard.steer(5.0, aim=0.9, well_under=0.7)
    assert guard.share == MIN_SHARE  # slowed to a trickle, never stopped
    guard.steer(0.5, aim=0.9, well_under=0.7)
    assert guard.share == pytest.approx(MIN_SHARE + RELEASE)
    for _ in range(round(1 / RELEASE) + 1):
        guard.steer(0.5, aim=0.9, well_under=0.7)
    assert guard.share == 1.0 and not guard.pacing


def test_slo_guard_paces_batches_to_its_share_of_the_capacity() -> None:
    guard = SloGuard(capacity=2)
    guard.steer(1.0, aim=0.9, well_under=0.7)  # share 0.5 of 2 executions: one core's worth
    assert guard.allows(0.0)
    rate = guard.charge(0.0, 0.010)
    assert rate == 1.0
    assert not guard.allows(0.009)
    assert guard.allows(0.010)
    rate = guard.charge(0.010, 0.010)  # a second one back to back pushes the next further
    assert guard.resume_at == pytest.approx(0.020)
    guard.settle(rate, 0.010, 0.030)  # it took 30 ms, not 10: charged for what it used
    assert guard.resume_at == pytest.approx(0.040)
    guard.charge(1.0, 0.010)  # after a quiet spell the pacing starts from now
    assert guard.resume_at == pytest.approx(1.010)
