"""Whether tune's winner replaces the model's current configuration."""

from __future__ import annotations

from inferplex_tools.tuner.decision import MIN_GAIN, decide
from inferplex_tools.tuner.pareto import Point

CURRENT = Point("b8_d0_i1_t0_fp32", 1000.0, 5.0)


def test_the_current_configuration_winning_is_kept() -> None:
    decision = decide(Point(CURRENT.key, 1000.0, 5.0), CURRENT, None)
    assert not decision.write
    assert "is the best" in decision.reason


def test_a_gain_within_the_margin_keeps_the_current_configuration() -> None:
    best = Point("b32_d0_i1_t1_fp32", 1000.0 * (1 + MIN_GAIN) - 1, 4.0)
    decision = decide(best, CURRENT, None)
    assert not decision.write
    assert "margin" in decision.reason and "kept" in decision.reason
    assert CURRENT.key in decision.reason and best.key in decision.reason


def test_a_gain_above_the_margin_replaces_it() -> None:
    best = Point("b32_d0_i1_t1_fp32", 1000.0 * (1 + MIN_GAIN) + 1, 9.0)
    decision = decide(best, CURRENT, None)
    assert decision.write and "+10.1%" in decision.reason
    assert not decide(best, CURRENT, None, min_gain=0.2).write


def test_meeting_a_target_the_current_configuration_misses_replaces_it() -> None:
    best = Point("b1_d0_i2_t1_fp32", 900.0, 3.0)  # slower, but within the target
    assert decide(best, CURRENT, target_ms=4.0).write
    assert not decide(best, CURRENT, target_ms=6.0).write  # both meet it: throughput decides


def test_without_a_measurement_of_the_current_configuration_the_winner_is_written() -> None:
    decision = decide(Point("b8_d0_i1_t1_fp32", 10.0, 1.0), None, None)
    assert decision.write and "not measured" in decision.reason


def test_a_current_configuration_that_did_not_answer_is_replaced() -> None:
    assert decide(Point("b8_d0_i1_t1_fp32", 10.0, 1.0), Point("x", 0.0, 1.0), None).write
