"""The regression gate: figures beyond the threshold, missing cases, compatibility."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.compare import compare
from inferplex_tools.benchtool.results import BenchReport, CaseResult

LATENCY = {
    "requests": 1000,
    "seconds": 1.0,
    "throughput": 1000.0,
    "mean_ms": 1.0,
    "min_ms": 0.5,
    "max_ms": 5.0,
    "p50_ms": 1.0,
    "p90_ms": 1.5,
    "p95_ms": 2.0,
    "p99_ms": 3.0,
}
SERVER = {"server_request_us": 100.0, "queue_us": 20.0, "compute_infer_us": 50.0, "batch_size": 2.0}
COMPAT = {
    "endpoints": {"worked": ["http GET /v2"], "partly": {}, "failed": {}},
    "datatypes": {"worked": ["input FP32"], "partly": {}, "failed": {}},
    "models": {"worked": ["add_sub", "other"], "partly": {}, "failed": {}},
}


def _case(model: str = "add_sub", level: float = 1, **changes: float) -> CaseResult:
    latency = {**LATENCY, **{k: v for k, v in changes.items() if k in LATENCY}}
    server = {**SERVER, **{k: v for k, v in changes.items() if k in SERVER}}
    return CaseResult(model, "", "http-binary", "concurrency", level, 1, latency, True, 3, server)


def _report(*cases: CaseResult, compat: dict | None = None) -> BenchReport:
    return BenchReport({}, {}, list(cases), copy.deepcopy(compat or COMPAT))


def test_identical_runs_pass() -> None:
    result = compare(_report(_case(), _case(level=4)), _report(_case(), _case(level=4)))
    assert result.passed and result.compared == 2 and not result.changes


def test_a_throughput_drop_beyond_the_threshold_is_a_regression() -> None:
    result = compare(_report(_case()), _report(_case(throughput=900.0)), threshold=5)
    assert not result.passed
    (change,) = result.regressions
    assert change.figure == "throughput" and change.percent == pytest.approx(-10.0)
    assert "REGRESSION" in result.format() and "FAIL" in result.format()


def test_moves_within_the_threshold_pass_and_the_threshold_is_settable() -> None:
    baseline, current = _report(_case()), _report(_case(p99_ms=3.24))  # +8%
    assert compare(baseline, current, threshold=10).passed
    assert not compare(baseline, current, threshold=5).passed


def test_improvements_are_flagged_but_pass() -> None:
    result = compare(_report(_case()), _report(_case(throughput=1500.0, p50_ms=0.5)))
    assert result.passed
    assert {c.figure for c in result.changes} == {"throughput", "p50_ms"}
    assert all(c.better for c in result.changes)


def test_server_figures_inform_but_do_not_fail() -> None:
    result = compare(_report(_case()), _report(_case(queue_us=200.0)))
    assert result.passed
    (change,) = result.changes
    assert change.figure == "queue_us" and not change.gating and not change.better


def test_a_missing_case_fails_and_a_new_one_does_not() -> None:
    result = compare(_report(_case(), _case(level=4)), _report(_case(), _case(level=16)))
    assert not result.passed
    assert result.missing == ["add_sub/http-binary/concurrency=4/b1"]
    assert result.added == ["add_sub/http-binary/concurrency=16/b1"]


def test_a_model_that_worked_and_fails_now_is_a_compatibility_regression() -> None:
    now = copy.deepcopy(COMPAT)
    now["models"] = {"worked": ["add_sub"], "partly": {}, "failed": {"other": "HTTP 500"}}
    result = compare(_report(_case()), _report(_case(), compat=now))
    assert not result.passed
    assert result.compat == ["model other: worked before, fails now: HTTP 500"]


def test_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        compare(_report(), _report(), threshold=-1)


def test_reports_round_trip_through_json(tmp_path: Path) -> None:
    report = _report(_case(), _case(level=4))
    path = tmp_path / "bench.json"
    report.write(path)
    again = BenchReport.read(path)
    assert [r.key for r in again.results] == [r.key for r in report.results]
    assert compare(report, again).passed


def test_a_file_that_is_not_a_bench_result_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"format": "something-else"}')
    with pytest.raises(BenchError, match="not an inferplex bench result"):
        BenchReport.read(path)
