"""``inferplex bench --scenario``: real MLPerf LoadGen driving a real server over loopback HTTP
and gRPC, each run as short as LoadGen allows. Figures and VALID/INVALID of the healthy runs
depend on the machine and are never asserted; that LoadGen's summary was read and printed is,
and so is a failing model's run being INVALID with its errors counted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from examples import modelgen
from inferplex.cli.main import main
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

pytest.importorskip("mlperf_loadgen")

#: the shortest LoadGen runs that still report every figure
SHORT = ["--min-duration-ms", "300", "--min-query-count", "20"]
PROTOCOLS = ["http", "grpc"]

#: TorchServe-style handler that answers its first request (the bench's probe) and fails
#: every later one, so the failures happen while LoadGen runs
FAILING = """
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    calls = 0

    def inference(self, data):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("asked to fail")
        return {"OUTPUT0": data["INPUT0"]}
"""
FAILING_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
#: what LoadGen's summary gives each scenario, as printed
SCENARIO_FIGURES = {
    "singlestream": ("SingleStream", ["QPS w/ loadgen overhead"]),
    "server": ("Server", ["Completed samples per second", "Scheduled samples per second"]),
    "offline": ("Offline", ["Samples per second"]),
}


@pytest.fixture(scope="module")
def mlperf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """add_sub, and one failing model per protocol (each fails from its second request on)."""
    repo = tmp_path_factory.mktemp("mlperf_repo")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    for protocol in PROTOCOLS:
        name = f"failing_{protocol}"
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(FAILING)
        (repo / name / "config.pbtxt").write_text(FAILING_CONFIG.format(name=name))
    running = start_server(repo, tmp_path_factory.mktemp("mlperf_server") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def bench(server: RunningServer, protocol: str, *args: str) -> Result:
    url = server.grpc_url if protocol == "grpc" else server.http_url
    command = ["bench", "--url", url, "--protocol", protocol, *args]
    return CliRunner().invoke(main, command, catch_exceptions=False)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("scenario", list(SCENARIO_FIGURES))
def test_each_scenario_prints_loadgen_summary(
    mlperf_server: RunningServer, tmp_path: Path, scenario: str, protocol: str
) -> None:
    logs = tmp_path / "logs"
    result = bench(
        mlperf_server, protocol, "--model", "add_sub", "--scenario", scenario,
        "--target-qps", "200", *SHORT, "--mlperf-log-dir", str(logs),
    )  # fmt: skip
    name, figures = SCENARIO_FIGURES[scenario]
    output = result.output
    assert output.startswith(f"{name} add_sub {'grpc' if protocol == 'grpc' else 'http-binary'}")
    assert (logs / "mlperf_log_summary.txt").exists()
    assert all(f"{figure} " in output for figure in figures), output
    assert "latency ms: min " in output and ", p90 " in output and ", p99 " in output
    assert "client CPU " in output and f"LoadGen log: {logs}" in output
    assert "errors:" not in output
    # the exit code follows LoadGen's verdict
    assert result.exit_code == (0 if "result: VALID" in output else 1), output


def test_find_peak_prints_every_probe(mlperf_server: RunningServer, tmp_path: Path) -> None:
    result = bench(
        mlperf_server, "http", "--model", "add_sub", "--scenario", "server", "--find-peak",
        "--target-qps", "200", "--peak-max-probes", "2", *SHORT,
        "--mlperf-log-dir", str(tmp_path),
    )  # fmt: skip
    lines = result.output.splitlines()
    assert lines[0].startswith("find-peak Server add_sub http-binary: p99 bound 10 ms")
    probes = [line for line in lines if line.startswith("  probe ")]
    assert len(probes) == 2 and probes[0].startswith("  probe 1: 200.0 QPS ")
    assert all(" VALID;" in p or " INVALID" in p for p in probes)
    assert len(list(tmp_path.glob("probe-*/mlperf_log_summary.txt"))) == 2
    found = any(" VALID;" in p for p in probes)
    assert result.exit_code == (0 if found else 1)
    assert ("peak: " in result.output) == found


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_failed_responses_make_the_run_invalid(
    mlperf_server: RunningServer, tmp_path: Path, protocol: str
) -> None:
    result = bench(
        mlperf_server, protocol, "--model", f"failing_{protocol}", "--scenario", "server",
        "--target-qps", "200", *SHORT, "--mlperf-log-dir", str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "result: INVALID (" in result.output and " failed responses)" in result.output
    assert "errors: " in result.output and "asked to fail" in result.output
    assert (tmp_path / "mlperf_log_summary.txt").exists()  # LoadGen finished its run


def test_a_request_the_server_refuses_is_invalid_before_loadgen(
    mlperf_server: RunningServer, tmp_path: Path
) -> None:
    result = bench(
        mlperf_server, "grpc", "--model", "add_sub", "--scenario", "offline",
        "--shape", "INPUT0:1,5", *SHORT, "--mlperf-log-dir", str(tmp_path),
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Offline add_sub grpc: INVALID: the probe request failed" in result.output
    assert not (tmp_path / "mlperf_log_summary.txt").exists()
