"""A real Prometheus server scrapes the metrics port; its queries see our series."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from inferplex_tools.benchtool.launch import RunningServer
from tests.support.prometheus import query, running_prometheus, wait_for_series


@pytest.fixture(scope="module")
def prometheus(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.ones((2, 16), dtype=np.float32)
    inputs = [httpclient.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    for _ in range(5):
        client.infer("add_sub", inputs)
    client.close()
    folder: Path = tmp_path_factory.mktemp("prometheus")
    with running_prometheus([server.metrics_url], folder) as url:
        yield url


def test_the_target_is_up_and_its_exposition_parses(prometheus: str) -> None:
    assert wait_for_series(prometheus, 'up{job="inferplex"} == 1'), "target never came up"
    targets = requests.get(f"{prometheus}/api/v1/targets", timeout=10).json()
    (target,) = targets["data"]["activeTargets"]
    assert target["health"] == "up", target.get("lastError")
    assert target["lastError"] == ""


def test_counters_histograms_and_gauges_are_queryable(prometheus: str) -> None:
    success = wait_for_series(prometheus, 'nv_inference_request_success{model="add_sub"} >= 5')
    assert success and success[0]["metric"]["version"] == "1"
    buckets = query(prometheus, 'inferplex_request_duration_seconds_bucket{model="add_sub"}')
    assert {series["metric"]["le"] for series in buckets} >= {"0.001", "+Inf"}
    count = query(prometheus, 'inferplex_request_duration_seconds_count{model="add_sub"}')
    assert float(count[0]["value"][1]) >= 5
    rows = query(prometheus, 'sum(inferplex_batch_size_sum{model="add_sub"})')
    assert float(rows[0]["value"][1]) >= 10
    assert query(prometheus, "inferplex_process_resident_memory_bytes > 0")
    broken = query(prometheus, 'inferplex_model_state{model="broken",state="UNAVAILABLE"}')
    assert float(broken[0]["value"][1]) == 1


def test_percentiles_come_from_the_histogram(prometheus: str) -> None:
    # a quantile over the whole history (rate() would need traffic between two scrapes)
    expr = (
        "histogram_quantile(0.99, sum by (le) "
        '(inferplex_request_duration_seconds_bucket{model="add_sub"}))'
    )
    (result,) = wait_for_series(prometheus, expr)
    assert 0 < float(result["value"][1]) <= 10
