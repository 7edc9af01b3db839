"""The metrics endpoint: Prometheus text with Triton's metric names."""

from __future__ import annotations

import re

import numpy as np
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from inferplex_tools.benchtool.launch import RunningServer


def scrape(server: RunningServer) -> dict[tuple[str, str, str], float]:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    return {
        (
            family.name,
            sample.labels.get("model", ""),
            sample.labels.get("version", ""),
        ): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_counters_follow_inference(server: RunningServer) -> None:
    before = scrape(server)
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.ones((2, 16), dtype=np.float32)
    inputs = [httpclient.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    client.infer("add_sub", inputs)
    client.close()
    after = scrape(server)
    key = ("nv_inference_request_success", "add_sub", "1")
    assert after[key] == before.get(key, 0) + 1
    rows = ("nv_inference_count", "add_sub", "1")
    assert after[rows] == before.get(rows, 0) + 2
    assert after[("nv_inference_compute_infer_duration_us", "add_sub", "1")] > 0
    assert after[("inferplex_model_ready", "broken", "")] == 0
    assert after[("inferplex_model_ready", "add_sub", "1")] == 1


def test_names_are_tritons_without_a_total_suffix(server: RunningServer) -> None:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    assert 'nv_inference_request_success{model="add_sub",version="1"}' in text
    counters = re.findall(r"^# TYPE (\S+) counter$", text, re.MULTILINE)
    assert "nv_inference_count" in counters
    assert not [name for name in counters if name.endswith("_total")]


def test_other_paths_are_404(server: RunningServer) -> None:
    assert requests.get(f"http://{server.metrics_url}/nope", timeout=10).status_code == 404
