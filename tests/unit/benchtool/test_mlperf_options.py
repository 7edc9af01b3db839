"""Bad --scenario options: a clear message and exit code 2, before any server is reached;
and the LoadGen settings each scenario gets."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex_tools.benchtool.mlperf import MlperfOptions, loadgen, loadgen_settings

SCENARIO = ["bench", "--model", "m", "--url", "127.0.0.1:9"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--scenario", "offline", "--find-peak"], "--find-peak searches a Server QPS"),
        (["--scenario", "server", "--target-qps", "0"], "--target-qps, --latency-bound-ms"),
        (["--scenario", "server", "--min-query-count", "0"], "--min-query-count >= 1"),
        (["--scenario", "server", "--max-in-flight", "0"], "--max-in-flight must be >= 1"),
        (["--scenario", "server", "--peak-tolerance", "0"], "--peak-tolerance must be > 0"),
        (
            ["--scenario", "server", "--concurrency", "4", "--json-out", "x.json"],
            "--scenario runs LoadGen's load: drop --concurrency, --json-out",
        ),
        (["--scenario", "server", "--model", "n"], "give exactly one --model"),
        (["--scenario", "nope"], "Invalid value for '--scenario'"),
    ],
)
def test_scenario_option_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, SCENARIO + args)
    assert result.exit_code == 2
    assert message in result.output


def test_an_unreachable_server_is_exit_2() -> None:
    result = CliRunner().invoke(main, [*SCENARIO, "--scenario", "singlestream"])
    assert result.exit_code == 2
    assert "127.0.0.1:9" in result.output


def test_loadgen_settings_per_scenario() -> None:
    lg = loadgen()
    options = MlperfOptions("server", latency_bound_ms=2.5, min_duration_ms=300, min_query_count=7)
    settings = loadgen_settings(lg, options, 123.0)
    assert settings.scenario == lg.TestScenario.Server
    assert settings.mode == lg.TestMode.PerformanceOnly
    assert settings.server_target_qps == 123.0
    assert settings.server_target_latency_ns == 2_500_000
    assert settings.server_target_latency_percentile == pytest.approx(0.99)
    assert (settings.min_duration_ms, settings.min_query_count) == (300, 7)
    offline = loadgen_settings(lg, MlperfOptions("offline"), 456.0)
    assert offline.scenario == lg.TestScenario.Offline and offline.offline_expected_qps == 456.0
    single = loadgen_settings(lg, MlperfOptions("singlestream", expected_latency_ms=0.2), 1.0)
    assert single.scenario == lg.TestScenario.SingleStream
    assert single.single_stream_expected_latency_ns == 200_000
