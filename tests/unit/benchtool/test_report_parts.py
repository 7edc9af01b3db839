"""Compatibility log, server breakdown, table, CSV, plot and progress bar."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.breakdown import breakdown, pick
from inferplex_tools.benchtool.compat import CompatLog, format_report, regressions
from inferplex_tools.benchtool.output import CSV_COLUMNS, table, write_csv
from inferplex_tools.benchtool.plot import plot
from inferplex_tools.benchtool.progress import Progress
from inferplex_tools.benchtool.results import CaseResult

PNG = b"\x89PNG\r\n\x1a\n"


def test_compat_log_sorts_outcomes_into_worked_partly_failed() -> None:
    log = CompatLog()
    log.endpoint("http GET /v2/models/{m}", True)
    log.endpoint("http GET /v2/models/{m}", False, "HTTP 404: unknown model 'x'")
    log.endpoint("http GET /v2/models/{m}/config", False, "HTTP 404")
    log.datatype("input FP32", True)
    log.model("add_sub", True)
    log.model("x", False, "unknown")
    report = log.to_dict()
    assert report["endpoints"] == {
        "worked": [],
        "partly": {"http GET /v2/models/{m}": "HTTP 404: unknown model 'x'"},
        "failed": {"http GET /v2/models/{m}/config": "HTTP 404"},
    }
    assert report["models"]["worked"] == ["add_sub"]
    assert report["models"]["failed"] == {"x": "unknown"}
    text = format_report(report)
    assert "FAIL    x: unknown" in text and "partly  http GET /v2/models/{m}" in text


def test_compat_regressions_name_what_stopped_working() -> None:
    before = {"endpoints": {"worked": ["a", "b"]}, "models": {"worked": ["m", "n"]}}
    now = {
        "endpoints": {"worked": [], "partly": {"a": "404"}, "failed": {}},
        "models": {"worked": [], "partly": {"m": "HTTP 500 at c=16"}, "failed": {}},
    }
    assert regressions(before, now) == [
        "endpoint b: worked before, not exercised now",
        "model m: worked before, fails now: HTTP 500 at c=16",
        "model n: worked before, not exercised now",
    ]


def _stats(success: int, ns: int, queue_ns: int, inferences: int, executions: int) -> dict:
    phases = {p: {"count": success, "ns": 0} for p in ("fail", "compute_input", "compute_output")}
    phases["fail"]["count"] = 0
    return {
        "name": "m",
        "version": "1",
        "inference_count": inferences,
        "execution_count": executions,
        "inference_stats": {
            **phases,
            "success": {"count": success, "ns": ns},
            "queue": {"count": success, "ns": queue_ns},
            "compute_infer": {"count": success, "ns": ns // 2},
        },
    }


def test_breakdown_averages_the_deltas_per_request() -> None:
    before = _stats(100, 10_000_000, 1_000_000, 100, 100)
    after = _stats(300, 50_000_000, 3_000_000, 300, 150)
    figures = breakdown(before, after, client_mean_ms=0.25)
    assert figures["requests"] == 200
    assert figures["server_request_us"] == 200.0  # 40 ms over 200 requests
    assert figures["queue_us"] == 10.0
    assert figures["compute_infer_us"] == 100.0
    assert figures["batch_size"] == 4.0  # 200 rows in 50 executions
    assert figures["client_overhead_us"] == 50.0


def test_pick_chooses_a_version_or_sums_them() -> None:
    one, two = _stats(1, 1, 1, 1, 1), {**_stats(2, 2, 2, 2, 2), "version": "2"}
    assert pick([one, two], "2") is two
    assert pick([one, two], "3") is None
    summed = pick([one, two], "")
    assert summed is not None and summed["inference_count"] == 3


def _result(level: float, throughput: float, p50: float) -> CaseResult:
    latency = {
        "requests": 10, "seconds": 1.0, "throughput": throughput, "mean_ms": p50, "min_ms": p50,
        "max_ms": p50, "p50_ms": p50, "p90_ms": p50, "p95_ms": p50, "p99_ms": p50 * 2,
    }  # fmt: skip
    server = {"queue_us": 5.0, "compute_infer_us": 40.0, "batch_size": 1.5}
    return CaseResult(
        "add_sub", "1", "grpc", "concurrency", level, 1, latency, level < 4, 3, server
    )


def test_table_csv_and_plot(tmp_path: Path) -> None:
    results = [_result(1, 1000.0, 1.0), _result(4, 2500.0, 1.6)]
    text = table(results)
    assert "add_sub" in text and "c=4" in text and "2500.0" in text and "NO (3 windows)" in text
    path = tmp_path / "out.csv"
    write_csv(results, path)
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert rows[1]["throughput"] == "2500.0" and rows[1]["server_batch_size"] == "1.5"
    png = tmp_path / "plot.png"
    plot(results, png)
    assert png.read_bytes().startswith(PNG) and png.stat().st_size > 5000
    with pytest.raises(BenchError, match="no results"):
        plot([], tmp_path / "empty.png")


def test_progress_bar_draws_only_when_enabled() -> None:
    stream = io.StringIO()
    bar = Progress(4, "bench", stream, enabled=True)
    bar.update(note="c=1")
    bar.update(3)
    assert "\rbench [######..................] 1/4 c=1" in stream.getvalue()
    assert "3/4" in stream.getvalue()
    bar.close()
    assert stream.getvalue().endswith("\r")
    quiet = io.StringIO()
    Progress(4, "bench", quiet).update()  # a StringIO is not a TTY
    assert quiet.getvalue() == ""
