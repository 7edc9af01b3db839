"""The pure parts of the version gate (best rounds) and of the scheduling A/B (side by side)."""

from __future__ import annotations

from inferplex_tools.benchtool.gate import best_rounds
from inferplex_tools.benchtool.policies import side_by_side
from inferplex_tools.benchtool.results import BenchReport, CaseResult


def _case(level: float, throughput: float, p99: float = 1.0) -> CaseResult:
    latency = {"throughput": throughput, "p50_ms": p99 / 2, "p99_ms": p99}
    return CaseResult("m", "1", "grpc", "concurrency", level, 1, latency, True, 3)


def _report(*cases: CaseResult, compat: dict | None = None) -> BenchReport:
    return BenchReport({"url": "x"}, {}, list(cases), compat or {})


def test_best_rounds_keeps_each_cases_fastest_round() -> None:
    first = _report(_case(1, 100.0), _case(4, 300.0))
    second = _report(_case(1, 120.0), _case(4, 250.0), compat={"models": {"worked": ["m"]}})
    merged = best_rounds([first, second])
    assert {r.key: r.throughput for r in merged.results} == {
        "m/grpc/concurrency=1/b1": 120.0,
        "m/grpc/concurrency=4/b1": 300.0,
    }
    assert merged.compat == {"models": {"worked": ["m"]}}  # the last round's


def test_side_by_side_prints_each_policy_and_the_ratio_to_the_first() -> None:
    reports = {
        "round_robin": _report(_case(1, 100.0, 2.0), _case(4, 200.0)),
        "priority": _report(_case(1, 150.0, 1.5)),
    }
    lines = side_by_side(reports).splitlines()
    assert "round_robin req/s" in lines[0] and "priority req/s" in lines[0]
    assert lines[1].split()[1:] == ["100.0", "2.000", "1.000", "150.0", "1.500", "1.500"]
    assert lines[2].split()[-3:] == ["failed", "-", "-"]  # the case priority did not measure
