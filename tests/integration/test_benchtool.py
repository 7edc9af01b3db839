"""``inferplex bench``, ``tune`` and ``heatmap`` against real servers, for a few seconds each.

The session server (tests/conftest.py) serves the test repository: every V2 datatype through
an identity model, add_sub, and a broken model. The version gate, the scheduling A/B and the
tuner start servers of their own (the bench's launcher). Figures are never asserted: the
regression gate is driven both ways with a doctored baseline.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from examples import modelgen
from inferplex.cli.main import main
from inferplex.config.readers import read_model_config
from inferplex.config.writers import write_config
from inferplex.datatypes import V2_DATATYPES
from inferplex_tools.benchtool.compat import CompatLog
from inferplex_tools.benchtool.control import HttpApi
from inferplex_tools.benchtool.gate import watch
from inferplex_tools.benchtool.launch import Launched, Ports, RunningServer, free_port, launch
from inferplex_tools.benchtool.sweep import BenchOptions
from inferplex_tools.tuner import runner

IDENTITIES = ",".join(f"identity_{d.lower()}" for d in sorted(V2_DATATYPES))
#: the shortest measurement: no warm-up, one window of 0.1 s
QUICK = ["--warmup", "0", "--window", "0.1", "--max-windows", "1", "--stable-windows", "1"]
PNG = b"\x89PNG\r\n\x1a\n"


def distinct_free_ports() -> Ports:
    ports: set[int] = set()
    while len(ports) < 3:
        ports.add(free_port())
    return Ports(*sorted(ports))


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    "protocol",
    [["--protocol", "http", "--binary"], ["--protocol", "http", "--json"], ["--protocol", "grpc"]],
)
def test_bench_every_datatype_and_report_what_failed(
    server: RunningServer, tmp_path: Path, protocol: list[str]
) -> None:
    url = server.grpc_url if "grpc" in protocol else server.http_url
    out = tmp_path / "bench.json"
    result = invoke(
        "bench", "--url", url, *protocol, "--model", f"{IDENTITIES},broken",
        "--shape", "INPUT0:1,4", *QUICK, "--json-out", str(out),
        "--compat-out", str(tmp_path / "compat.json"),
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # the broken model fails the run
    report = json.loads(out.read_text())
    assert len(report["results"]) == len(V2_DATATYPES)
    assert all(r["latency"]["requests"] > 0 for r in report["results"])
    assert all(r["server"]["requests"] > 0 for r in report["results"])
    compat = report["compat"]
    expected = {f"{side} {d}" for d in V2_DATATYPES for side in ("input", "output")}
    assert set(compat["datatypes"]["worked"]) == expected
    assert list(compat["models"]["failed"]) == ["broken"]
    ready = "grpc ServerReady" if "grpc" in protocol else "http GET /v2/health/ready"
    assert ready in compat["endpoints"]["worked"]
    assert "UNAVAILABLE" in compat["models"]["failed"]["broken"]
    assert json.loads((tmp_path / "compat.json").read_text())["compat"] == compat
    assert "FAIL    broken" in result.output and "identity_bytes" in result.output


def test_rate_sweep_with_outputs_recorded_metrics_and_heatmap(
    server: RunningServer, tmp_path: Path
) -> None:
    metrics = tmp_path / "metrics.jsonl"
    result = invoke(
        "bench", "--url", server.http_url, "--model", "add_sub", "--rate", "50,100",
        "--warmup", "0.1", "--window", "0.3", "--max-windows", "2",
        "--csv-out", str(tmp_path / "b.csv"), "--plot", str(tmp_path / "b.png"),
        "--record-metrics", str(metrics), "--metrics-url", server.metrics_url,
        "--record-interval", "0.2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "50/s" in result.output and "100/s" in result.output
    assert len((tmp_path / "b.csv").read_text().splitlines()) == 3
    assert (tmp_path / "b.png").read_bytes().startswith(PNG)
    assert len(metrics.read_text().splitlines()) >= 3
    heat = tmp_path / "heat.png"
    result = invoke("heatmap", "--input", str(metrics), "--out", str(heat))
    assert result.exit_code == 0, result.output
    assert heat.read_bytes().startswith(PNG) and heat.stat().st_size > 10_000


def test_compare_passes_within_the_threshold_and_fails_on_a_regression(
    server: RunningServer, tmp_path: Path
) -> None:
    baseline = tmp_path / "baseline.json"
    common = ["bench", "--url", server.grpc_url, "--protocol", "grpc", "--model", "add_sub"]
    common += ["--concurrency", "1,2", *QUICK]
    assert invoke(*common, "--json-out", str(baseline)).exit_code == 0
    passed = invoke(*common, "--compare", str(baseline), "--threshold", "1000000",
                    "--compat-out", str(tmp_path / "pass.json"))  # fmt: skip
    assert passed.exit_code == 0, passed.output
    assert "compare: 2 cases, threshold ±1e+06%: PASS" in passed.output
    # a baseline 100 times faster than anything this server does: every case regressed
    document = json.loads(baseline.read_text())
    for case in document["results"]:
        case["latency"]["throughput"] *= 100
        for figure in ("p50_ms", "p90_ms", "p95_ms", "p99_ms"):
            case["latency"][figure] /= 100
    doctored = tmp_path / "doctored.json"
    doctored.write_text(json.dumps(document))
    failed = invoke(*common, "--compare", str(doctored), "--compat-out", str(tmp_path / "f.json"))
    assert failed.exit_code == 1, failed.output
    assert "REGRESSION   add_sub/grpc/concurrency=2/b1 throughput" in failed.output
    comparison = json.loads((tmp_path / "f.json").read_text())["comparison"]
    assert not comparison["passed"] and comparison["cases_compared"] == 2


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """add_sub with versions 1 and 2, both served (version_policy all)."""
    repo = tmp_path_factory.mktemp("two_versions")
    for version in (1, 2):
        path = modelgen.add_sub(repo, version=version)
    config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
    config["version_policy"] = {"all": {}}
    write_config(repo / "add_sub", config)
    return repo


def test_version_gate_promotes_a_passing_version(two_versions: Path) -> None:
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with launch(two_versions, args) as served:
        api = HttpApi(served.http, CompatLog())
        assert api.model_metadata("add_sub")["versions"] == ["1", "2"]
        result = invoke(
            "bench", "--url", served.http, "--model", "add_sub", "--gate-version", "2",
            "--gate-rounds", "1", "--threshold", "1000000", *QUICK,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "version 2 promoted" in result.output
        assert api.model_metadata("add_sub")["versions"] == ["2"]


async def test_gate_watch_gates_a_version_as_the_server_loads_it(tmp_path: Path) -> None:
    repo, staging = tmp_path / "repo", tmp_path / "staging"
    path = modelgen.add_sub(repo, version=1)
    config = modelgen.model_config(path, max_batch_size=8)
    config["version_policy"] = {"latest": {"num_versions": 2}}
    write_config(repo / "add_sub", config)
    poll = ["--model-control-mode", "poll", "--repository-poll-secs", "0.2"]
    with launch(repo, poll) as served:
        options = BenchOptions(
            url=served.http, models=["add_sub"], concurrency=[1], warmup=0, window=0.1,
            max_windows=1, stable_count=1,
        )  # fmt: skip
        task = asyncio.create_task(watch(options, threshold=1e6, rounds=1, interval=0.2, count=1))
        await asyncio.sleep(0)  # the watch reads the served versions before its first poll
        modelgen.add_sub(staging, version=2)
        (staging / "add_sub" / "2").rename(repo / "add_sub" / "2")  # appears at once, whole
        (result,) = await asyncio.wait_for(task, timeout=120)
        assert (result.serving, result.candidate, result.promoted) == ("1", "2", True)
        assert HttpApi(served.http, CompatLog()).model_metadata("add_sub")["versions"] == ["2"]


def test_scheduling_policies_side_by_side(two_versions: Path, tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    result = invoke(
        "bench", "--model-repository", str(two_versions), "--policies", "round_robin,priority",
        "--model", "add_sub", "--concurrency", "2", *QUICK, "--json-out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "side by side" in result.output
    assert "round_robin req/s" in result.output and "priority req/s" in result.output
    document = json.loads(out.read_text())
    assert list(document["policies"]) == ["round_robin", "priority"]


def test_tune_two_models_together_writes_the_best_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = distinct_free_ports()
    used: list[Ports | None] = []

    def recording_launch(*args: Any, **kwargs: Any) -> AbstractContextManager[Launched]:
        used.append(kwargs.get("ports"))
        return launch(*args, **kwargs)

    monkeypatch.setattr(runner, "launch", recording_launch)
    repo = tmp_path / "repo"
    for name in ("add_sub", "add_sub_b"):
        path = modelgen.add_sub(repo, name=name)
        config = modelgen.model_config(path, max_batch_size=8)
        config["parameters"] = {"intra_op_thread_count": "1"}  # the current one: b8_..._t1
        write_config(repo / name, config)
    results = tmp_path / "tune.jsonl"
    args = [
        "tune", "--model-repository", str(repo), "--model", "add_sub,add_sub_b",
        "--max-batch-size", "1,8", "--eta", "2", "--concurrency", "2",
        "--warmup", "0", "--window", "0.15", "--windows", "2", "--results", str(results),
        "--ports", ",".join(map(str, ports)),
    ]  # fmt: skip
    result = invoke(*args, "--write")
    assert result.exit_code == 0, result.output
    assert len(used) >= 2 and set(used) == {ports}  # one server per rung, one after another
    assert "2 candidates, 2 rungs" in result.output and "Pareto frontier" in result.output
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    # rung 1: the winner, then the current configuration when it lost rung 0
    assert [line["rung"] for line in lines] in ([0, 0, 1], [0, 0, 1, 1])
    assert all(sorted(line["per_model"]) == ["add_sub", "add_sub_b"] for line in lines)
    assert "current: b8_d0_i1_t1_fp32" in result.output
    replaced = "verdict: replace" in result.output
    assert replaced or "verdict: keep" in result.output
    assert replaced or "not written: the current configuration is kept" in result.output
    best = lines[2]["candidate"]
    for name in ("add_sub", "add_sub_b"):
        config = read_model_config(repo / name)
        assert config is not None
        assert config.max_batch_size == (best["max_batch_size"] if replaced else 8)
        assert config.parameters["intra_op_thread_count"] == "1"
    again = invoke(*args)  # everything is in the results file: nothing is measured again
    assert again.exit_code == 0, again.output
    assert f"resumed: {len(lines)} measurements" in again.output
    assert len(results.read_text().splitlines()) == len(lines)
