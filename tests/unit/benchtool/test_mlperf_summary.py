"""LoadGen's summary file read back: the texts below are LoadGen 6.0's own, from runs of
`inferplex bench --scenario` (Server and SingleStream) and of a bare SUT (Offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.mlperf_summary import detail_errors, parse_summary, read_summary

SERVER = """\
================================================
MLPerf Results Summary
================================================
SUT name : PySUT
Scenario : Server
Mode     : PerformanceOnly
Completed samples per second    : 282.71
Result is : INVALID
  Performance constraints satisfied : Yes
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: NO
Recommendations:
Early Stopping Result:
 * Run unsuccessful.
 * Processed 288 queries.
 * Would need to run at least 171 more queries,
 with the run being successful if every additional
 query were under latency.

================================================
Additional Stats
================================================
Scheduled samples per second : 283.10
Min latency (ns)                : 545499
Max latency (ns)                : 5941762
Mean latency (ns)               : 1348133
50.00 percentile latency (ns)   : 1183768
90.00 percentile latency (ns)   : 1945939
95.00 percentile latency (ns)   : 2295440
97.00 percentile latency (ns)   : 3068236
99.00 percentile latency (ns)   : 4741923
99.90 percentile latency (ns)   : 5941762

================================================
Test Parameters Used
================================================
samples_per_query : 1
target_qps : 300
target_latency (ns): 10000000
min_duration (ms): 1000

No warnings encountered during test.

No errors encountered during test.
"""

SINGLE_STREAM = """\
================================================
MLPerf Results Summary
================================================
SUT name : PySUT
Scenario : SingleStream
Mode     : PerformanceOnly
90.0th percentile latency (ns) : 529127
Result is : VALID
  Min duration satisfied : Yes
  Min queries satisfied : Yes
  Early stopping satisfied: Yes
Early Stopping Result:
 * Processed at least 64 queries (2001).

================================================
Additional Stats
================================================
QPS w/ loadgen overhead         : 1999.18
QPS w/o loadgen overhead        : 2053.88

Min latency (ns)                : 446862
Mean latency (ns)               : 486877
50.00 percentile latency (ns)   : 474214
90.00 percentile latency (ns)   : 529127
99.00 percentile latency (ns)   : 611760

================================================
Test Parameters Used
================================================
samples_per_query : 1
"""

OFFLINE = """\
================================================
MLPerf Results Summary
================================================
SUT name : PySUT
Scenario : Offline
Mode     : PerformanceOnly
Samples per second: 535379
Result is : INVALID
  Min duration satisfied : NO
  Min queries satisfied : Yes
  Early stopping satisfied: Yes
Recommendations:
 * Increase expected QPS so the loadgen pre-generates a larger (coalesced) query.

================================================
Additional Stats
================================================
Min latency (ns)                : 616386
99.00 percentile latency (ns)   : 616386

================================================
Test Parameters Used
================================================
min_duration (ms): 300

No warnings encountered during test.

1 ERROR encountered. See detailed log.
"""


def test_server_summary() -> None:
    summary = parse_summary(SERVER)
    assert (summary.scenario, summary.mode, summary.valid) == ("Server", "PerformanceOnly", False)
    assert summary.completed_qps == 282.71
    assert summary.scheduled_qps == 283.10
    assert summary.percentiles_ns == {
        50.0: 1183768,
        90.0: 1945939,
        95.0: 2295440,
        97.0: 3068236,
        99.0: 4741923,
        99.9: 5941762,
    }
    assert summary.metrics["Mean latency (ns)"] == 1348133
    assert summary.unmet == ["Early stopping"]
    # the wrapped note is one note; the settings (target_qps, min_duration) are not figures
    assert summary.notes[-1] == (
        "Would need to run at least 171 more queries, with the run being successful if "
        "every additional query were under latency."
    )
    assert "target_qps" not in summary.metrics and "min_duration (ms)" not in summary.metrics


def test_single_stream_summary() -> None:
    summary = parse_summary(SINGLE_STREAM)
    assert summary.valid and summary.scenario == "SingleStream"
    assert summary.metrics["90.0th percentile latency (ns)"] == 529127
    assert summary.percentiles_ns[90.0] == 529127 and summary.percentiles_ns[99.0] == 611760
    assert summary.completed_qps == 1999.18
    assert summary.scheduled_qps is None
    assert summary.unmet == []


def test_offline_summary_and_loadgen_error_count() -> None:
    summary = parse_summary(OFFLINE)
    assert not summary.valid and summary.scenario == "Offline"
    assert summary.completed_qps == 535379
    assert summary.unmet == ["Min duration"]
    assert summary.notes == [
        "Increase expected QPS so the loadgen pre-generates a larger (coalesced) query.",
        "1 ERROR encountered. See detailed log.",
    ]


def test_a_summary_without_a_result_is_an_error() -> None:
    with pytest.raises(BenchError, match="no 'Result is' line"):
        parse_summary(SERVER.replace("Result is : INVALID", ""))


def test_read_summary_adds_loadgen_errors_from_the_detail_log(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="LoadGen wrote no summary"):
        read_summary(tmp_path)
    (tmp_path / "mlperf_log_summary.txt").write_text(OFFLINE)
    error = {"key": "error_runtime", "value": "Ran out of generated queries"}
    entry = f":::MLLOG {json.dumps({**error, 'metadata': {'is_error': True}})}"
    plain = f":::MLLOG {json.dumps({'key': 'x', 'value': 1, 'metadata': {'is_error': False}})}"
    (tmp_path / "mlperf_log_detail.txt").write_text("\n".join([plain, entry, entry]) + "\n")
    assert read_summary(tmp_path).notes[-1] == "Ran out of generated queries"
    assert detail_errors(f"{plain}\n{entry}\n{entry}") == ["Ran out of generated queries"]
