"""The circuit breaker and request timeouts over HTTP against a real server."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

COOLDOWN_S = 2.0


def build_repository(repo: Path) -> Path:
    path = modelgen.reshape(repo, name="fragile")
    config = modelgen.model_config(path)
    config["parameters"] = {"breaker_failures": "2", "breaker_cooldown_s": str(COOLDOWN_S)}
    write_config(repo / "fragile", config, fmt="yaml")
    path = modelgen.slow(repo, name="late", seconds=1.0)
    config = modelgen.model_config(path)
    config["parameters"] = {"request_timeout_ms": "200"}
    write_config(repo / "late", config, fmt="yaml")
    path = modelgen.reshape(repo, name="misconfigured")
    config = modelgen.model_config(path)
    config["parameters"] = {"breaker_failures": "many"}
    write_config(repo / "misconfigured", config, fmt="yaml")
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_repository(tmp_path_factory.mktemp("breaker_repository"))
    running = start_server(repo, tmp_path_factory.mktemp("breaker_server") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def fragile(server: RunningServer, ok: bool) -> requests.Response:
    """A request that works (``ok``) or fails inside ONNX Runtime."""
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
            {"name": "SHAPE", "datatype": "INT64", "shape": [1], "data": [4 if ok else 5]},
        ]
    }
    return requests.post(f"http://{server.http_url}/v2/models/fragile/infer", json=body)


def breaker(server: RunningServer) -> dict[str, Any]:
    stats = requests.get(f"http://{server.http_url}/v2/models/fragile/stats").json()
    return stats["model_stats"][0]["circuit_breaker"]


def until(condition: Any, what: str, deadline_s: float = 30.0) -> Any:
    """Poll ``condition`` until it returns something true."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_breaker_opens_half_opens_closes_and_reopens(server: RunningServer) -> None:
    assert fragile(server, ok=True).status_code == 200
    # bad input is the client's fault: it never counts
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}
    bad = requests.post(f"http://{server.http_url}/v2/models/fragile/infer", json=body)
    assert bad.status_code == 400
    for _ in range(2):
        failed = fragile(server, ok=False)
        assert failed.status_code == 500 and "Reshape" in failed.json()["error"]
    # open: even a good request fast-fails, 503, naming the model and when it retries
    refused = fragile(server, ok=True)
    assert refused.status_code == 503
    message = refused.json()["error"]
    assert "model 'fragile' is failing: circuit breaker open after 2 consecutive" in message
    assert "retries in" in message
    state = breaker(server)
    assert state["state"] == "OPEN" and state["times_opened"] == 1 and state["rejected"] >= 1
    # after the cooldown one probe goes through; it works, so the breaker closes
    until(lambda: fragile(server, ok=True).status_code == 200, "the probe to close it")
    assert breaker(server)["state"] == "CLOSED"
    # open again; this time the probe fails and the breaker re-opens
    for _ in range(2):
        assert fragile(server, ok=False).status_code == 500
    until(lambda: fragile(server, ok=False).status_code == 500, "the failing probe")
    state = breaker(server)
    assert state["state"] == "OPEN" and state["times_opened"] == 3


def test_request_timeout_answers_504_and_expired_requests_leave_the_queue(
    server: RunningServer,
) -> None:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]}

    def call(_: int) -> requests.Response:
        return requests.post(f"http://{server.http_url}/v2/models/late/infer", json=body)

    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(call, range(3)))
    for reply in replies:
        assert reply.status_code == 504, reply.text
        error = reply.json()["error"]
        assert "model 'late'" in error and ("200 ms" in error or "in the queue" in error)
    # the request's own timeout may only shorten the model's
    short = dict(body, parameters={"timeout": 50_000})
    reply = requests.post(f"http://{server.http_url}/v2/models/late/infer", json=short)
    assert reply.status_code == 504
    # the earlier requests may still hold the instance: then it expires in the queue instead
    expired = re.search(r"within 50 ms|after ([\d.]+) ms in the queue", reply.json()["error"])
    assert expired and (expired.group(1) is None or float(expired.group(1)) < 200)


def test_a_malformed_setting_fails_the_load_with_its_reason(server: RunningServer) -> None:
    index = requests.post(f"http://{server.http_url}/v2/repository/index").json()
    (entry,) = [m for m in index if m["name"] == "misconfigured"]
    assert entry["state"] == "UNAVAILABLE"
    assert "parameter breaker_failures must be an integer >= 0, got 'many'" in entry["reason"]
