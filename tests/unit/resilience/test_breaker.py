"""The circuit breaker's every state transition, on a controlled clock."""

from __future__ import annotations

import pytest

from inferplex.errors import ErrorCode, ServerBusyError
from inferplex.resilience.breaker import BreakerSettings, BreakerState, CircuitBreaker


def breaker(threshold: int = 3, cooldown: float = 10.0) -> CircuitBreaker:
    return CircuitBreaker("m", BreakerSettings(threshold, cooldown))


def fail(b: CircuitBreaker, now: float, times: int = 1) -> None:
    for _ in range(times):
        probe = b.admit(now)
        b.failure(probe, now, "boom")


def test_closed_lets_requests_through_and_success_resets_the_count() -> None:
    b = breaker(3)
    fail(b, 0.0, 2)
    assert b.state is BreakerState.CLOSED and b.consecutive_failures == 2
    b.success(b.admit(0.0))
    assert b.consecutive_failures == 0
    fail(b, 0.0, 2)  # not consecutive with the first two: still closed
    assert b.state is BreakerState.CLOSED


def test_opens_after_n_consecutive_failures_and_fast_fails_naming_the_model() -> None:
    b = breaker(3, cooldown=10.0)
    fail(b, 100.0, 3)
    assert b.state is BreakerState.OPEN and b.times_opened == 1
    with pytest.raises(ServerBusyError) as caught:
        b.admit(104.0)
    error = caught.value
    assert error.code is ErrorCode.UNAVAILABLE
    assert "model 'm'" in error.message
    assert "3 consecutive failure(s) (last: boom)" in error.message
    assert "retries in 6.0 s" in error.message
    assert b.rejected == 1
    assert b.retry_in(104.0) == pytest.approx(6.0)


def test_half_open_after_the_cooldown_admits_one_probe() -> None:
    b = breaker(1, cooldown=5.0)
    fail(b, 0.0)
    with pytest.raises(ServerBusyError):
        b.admit(4.999)
    assert b.admit(5.0) is True  # the probe
    assert b.state is BreakerState.HALF_OPEN
    with pytest.raises(ServerBusyError, match="probe request is testing"):
        b.admit(5.1)  # a second request while the probe runs


def test_probe_success_closes() -> None:
    b = breaker(2, cooldown=1.0)
    fail(b, 0.0, 2)
    probe = b.admit(1.0)
    b.success(probe)
    assert b.state is BreakerState.CLOSED and b.consecutive_failures == 0
    assert b.admit(1.0) is False  # closed: no probe any more


def test_probe_failure_reopens_with_a_new_cooldown() -> None:
    b = breaker(2, cooldown=1.0)
    fail(b, 0.0, 2)
    probe = b.admit(1.5)
    b.failure(probe, 1.5, "still broken")
    assert b.state is BreakerState.OPEN and b.times_opened == 2
    with pytest.raises(ServerBusyError, match="last: still broken"):
        b.admit(2.4)  # 0.9 s into the new cooldown
    assert b.admit(2.5) is True


def test_probe_without_verdict_frees_the_slot() -> None:
    b = breaker(1, cooldown=0.0)
    fail(b, 0.0)
    probe = b.admit(0.0)
    b.release(probe)  # e.g. the probe was a bad request
    assert b.state is BreakerState.HALF_OPEN
    assert b.admit(0.0) is True  # the next request probes


def test_late_failures_of_requests_admitted_before_opening_keep_it_open() -> None:
    b = breaker(2, cooldown=10.0)
    early = [b.admit(0.0) for _ in range(3)]
    for probe in early:
        b.failure(probe, 0.0, "x")
    assert b.state is BreakerState.OPEN and b.times_opened == 1


def test_statistics_and_settings_checks() -> None:
    b = breaker(1, cooldown=2.0)
    fail(b, 10.0)
    stats = b.to_dict(11.0)
    assert stats["state"] == "OPEN" and stats["retry_in_s"] == 1.0
    assert stats["failure_threshold"] == 1 and stats["last_error"] == "boom"
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker("m", BreakerSettings(0, 1.0))
