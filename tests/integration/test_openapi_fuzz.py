"""schemathesis against the published OpenAPI description (docs/openapi.yaml): generated
requests for every operation, checked for zero crashes (no 500s), against a real server
on loopback; afterwards the server still answers an inference correctly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from inferplex.config.server_config import ServerConfig
from inferplex.server import Server

SPEC = Path(__file__).parents[2] / "docs" / "openapi.yaml"
schema = schemathesis.openapi.from_path(SPEC)
cases_tried = 0


@pytest.fixture(scope="module")
def base_url(test_repository: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A server of its own, so fuzzed load/unload calls cannot disturb other tests."""
    config = ServerConfig(
        model_repository=test_repository, http_port=0, grpc_port=0, metrics_port=0
    )
    server = Server(config).start_in_thread()
    yield f"http://127.0.0.1:{server.http_port}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"schemathesis: {cases_tried} generated requests, no server error")
    server.stop_thread()


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case: schemathesis.Case, base_url: str) -> None:
    global cases_tried
    cases_tried += 1
    response = case.call(base_url=base_url, timeout=30)
    # 501 (not implemented), 503 (model not ready, control disabled) and 504 (deadline) are
    # answers; a 500 is a crash
    assert response.status_code not in (500, 502), response.text
    if response.status_code >= 400 and response.status_code != 405:
        assert response.json()["error"], response.text


def test_server_still_answers_correctly_afterwards(base_url: str) -> None:
    body = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
        ]
    }
    response = requests.post(f"{base_url}/v2/models/add_sub/infer", json=body, timeout=10)
    assert response.status_code == 200
    outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
    assert outputs == {"OUTPUT0": [3.0] * 16, "OUTPUT1": [1.0] * 16}
    assert requests.get(f"{base_url}/v2/health/ready", timeout=5).status_code == 200
