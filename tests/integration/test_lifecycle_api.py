"""The repository API over real sockets (HTTP and gRPC, Triton's clients), its error paths,
and reload under load: clients keep sending while versions are added, replaced and removed."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.lifecycle import (
    add_model,
    add_sub_config,
    add_version,
    break_version,
    remove_version,
    wait_until,
)

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)


def serve(repo: Path, tmp_path: Path, **env: str) -> RunningServer:
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in env.items()}
    return start_server(repo, tmp_path / "server.log", env=settings)


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repository")
    add_model(repo)
    break_version(repo, 1, "broken")
    running = serve(repo, tmp_path_factory.mktemp("log"), model_control_mode="explicit")
    yield running
    assert running.stop() == 0, running.log()


def http_post(server: RunningServer, path: str, body: Any = None) -> requests.Response:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body)
    return requests.post(f"http://{server.http_url}{path}", data=data, timeout=30)


def grpc_status(call: Callable[[], Any]) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        call()
    return str(info.value.status()), info.value.message()


BAD_JSON = {"parameters": {"config": "{not json"}}


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v2/repository/models/nope/load", None, 404, "'nope' is not in the model repository"),
        ("/v2/repository/models/broken/load", None, 400, "load failed for model 'broken'"),
        (
            "/v2/repository/models/nope/unload",
            None,
            404,
            "Request for unknown model: 'nope' is not found",
        ),
        ("/v2/repository/models/add_sub/load", BAD_JSON, 400, "'config' is not valid JSON"),
        ("/v2/repository/models/add_sub/load", b"{", 400, "malformed JSON in the load request"),
        ("/v2/repository/models/add_sub/load", {"x": 1}, 400, "unknown field(s) x"),
        ("/v2/repository/models/add_sub/instances", {}, 400, 'needs "count"'),
        ("/v2/repository/models/add_sub/instances", {"count": 0}, 400, "must be an integer"),
        ("/v2/repository/models/nope/default_version", {"version": "1"}, 404, "unknown model"),
    ],
)
def test_http_error_paths(
    explicit: RunningServer, path: str, body: Any, status: int, fragment: str
) -> None:
    response = http_post(explicit, path, body)
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]


def test_grpc_error_paths(explicit: RunningServer) -> None:
    with grpcclient.InferenceServerClient(explicit.grpc_url) as client:
        status, message = grpc_status(lambda: client.load_model("nope"))
        assert status == "StatusCode.NOT_FOUND" and "not in the model repository" in message
        status, message = grpc_status(lambda: client.load_model("broken"))
        assert (
            status == "StatusCode.INVALID_ARGUMENT" and "load failed for model 'broken'" in message
        )
        status, message = grpc_status(lambda: client.unload_model("nope"))
        assert (
            status == "StatusCode.NOT_FOUND"
            and "Request for unknown model: 'nope' is not found" in message
        )
        status, message = grpc_status(lambda: client.load_model("add_sub", config="{not json"))
        assert status == "StatusCode.INVALID_ARGUMENT" and "not valid JSON" in message
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["broken"].state == "UNAVAILABLE" and index["broken"].reason


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_load_and_unload_with_triton_clients(explicit: RunningServer, transport: str) -> None:
    module = httpclient if transport == "http" else grpcclient
    url = explicit.http_url if transport == "http" else explicit.grpc_url
    client = module.InferenceServerClient(url)
    try:
        client.load_model("add_sub")
        assert client.is_model_ready("add_sub")
        config = json.dumps(add_sub_config(explicit.repository, max_batch_size=4))
        client.load_model("add_sub", config=config)
        if transport == "http":
            assert client.get_model_config("add_sub")["max_batch_size"] == 4
        else:
            assert client.get_model_config("add_sub").config.max_batch_size == 4
        client.unload_model("add_sub", unload_dependents=True)
        assert not client.is_model_ready("add_sub")
        states = {m["name"]: m for m in _index(client, transport)}
        assert states["add_sub"]["state"] == "UNAVAILABLE"
        assert states["add_sub"]["reason"] == "unloaded"
    finally:
        client.close()


def _index(client: Any, transport: str) -> list[dict[str, Any]]:
    if transport == "http":
        return list(client.get_model_repository_index())
    return [
        {"name": m.name, "state": m.state, "reason": m.reason}
        for m in client.get_model_repository_index().models
    ]


def test_runtime_management_over_http(explicit: RunningServer) -> None:
    repo = explicit.repository
    add_version(repo, 2)
    config = add_sub_config(repo, version_policy={"all": {}})
    assert http_post(explicit, "/v2/repository/models/add_sub/load", {
        "parameters": {"config": json.dumps(config)}
    }).status_code == 200  # fmt: skip
    with httpclient.InferenceServerClient(explicit.http_url) as client:
        assert client.get_model_metadata("add_sub")["versions"] == ["1", "2"]
        assert _infer_http(client).get_response()["model_version"] == "2"
        response = http_post(explicit, "/v2/repository/models/add_sub/default_version", {
            "version": "1"
        })  # fmt: skip
        assert response.status_code == 200, response.text
        assert _infer_http(client).get_response()["model_version"] == "1"
        response = http_post(explicit, "/v2/repository/models/add_sub/instances", {"count": 2})
        assert response.status_code == 200, response.text
        assert _infer_http(client).get_response()["model_version"] == "1"
    memory = requests.get(f"http://{explicit.http_url}/v2/repository/memory", timeout=10).json()
    (model,) = [m for m in memory["models"] if m["name"] == "add_sub"]
    assert set(model["versions"]) == {"1", "2"} and memory["rss"] > 0
    remove_version(repo, 2)
    assert http_post(explicit, "/v2/repository/models/add_sub/unload").status_code == 200


def test_control_refused_in_mode_none(server: RunningServer) -> None:
    # the session's server (tests/conftest.py) runs in the default mode none
    response = http_post(server, "/v2/repository/models/add_sub/unload")
    assert response.status_code == 503
    assert "--model-control-mode explicit" in response.json()["error"]


def _infer_http(client: Any) -> Any:
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return client.infer("add_sub", inputs)


def _infer_grpc(client: Any) -> Any:
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    return client.infer("add_sub", inputs)


class Clients:
    """HTTP and gRPC client threads sending add_sub requests until stopped; every failure
    and every answer's version is recorded."""

    def __init__(self, server: RunningServer, per_transport: int = 2) -> None:
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.versions: list[str] = []
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(server, transport), daemon=True)
            for transport in ("http", "grpc")
            for _ in range(per_transport)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, server: RunningServer, transport: str) -> None:
        module = httpclient if transport == "http" else grpcclient
        client = module.InferenceServerClient(
            server.http_url if transport == "http" else server.grpc_url
        )
        infer = _infer_http if transport == "http" else _infer_grpc
        try:
            while not self.stop.is_set():
                try:
                    result = infer(client)
                    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
                    version = (
                        result.get_response()["model_version"]
                        if transport == "http"
                        else result.get_response().model_version
                    )
                    with self._lock:
                        self.versions.append(version)
                except Exception as exc:  # every failure is the test's finding
                    with self._lock:
                        self.failures.append(f"{transport}: {exc}")
        finally:
            client.close()

    def served(self) -> int:
        with self._lock:
            return len(self.versions)

    def wait_for_more(self, count: int = 40) -> None:
        """Block until ``count`` more requests were answered."""
        target = self.served() + count
        wait_until(lambda: self.served() >= target or bool(self.failures), what="traffic")

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def test_reload_under_load(tmp_path: Path) -> None:
    repo = tmp_path / "repository"
    add_model(repo)
    server = serve(repo, tmp_path, model_control_mode="poll", repository_poll_secs="0.1")
    clients = Clients(server)

    def versions() -> list[str]:
        response = requests.get(f"http://{server.http_url}/v2/models/add_sub", timeout=10)
        return list(response.json()["versions"])

    try:
        clients.wait_for_more()
        add_version(repo, 2)  # added: the poller loads 2 beside 1, then 1 goes
        wait_until(lambda: versions() == ["2"], what="version 2 served")
        clients.wait_for_more()
        add_version(repo, 2)  # replaced in place; the load call returns after the switch
        assert http_post(server, "/v2/repository/models/add_sub/load").status_code == 200
        clients.wait_for_more()
        config = add_sub_config(repo, dynamic_batching={"max_queue_delay_microseconds": 200})
        (repo / "add_sub" / "config.pbtxt").unlink()
        (repo / "add_sub" / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        assert http_post(server, "/v2/repository/models/add_sub/load").status_code == 200
        clients.wait_for_more()
        break_version(repo, 3)  # a broken newer version: the old one keeps serving
        response = http_post(server, "/v2/repository/models/add_sub/load")
        assert response.status_code == 400, response.text
        clients.wait_for_more()
        remove_version(repo, 3)
        remove_version(repo, 2)  # removed: back to version 1
        wait_until(lambda: versions() == ["1"], what="version 1 served again")
        clients.wait_for_more()
    finally:
        clients.close()
        code = server.stop()
    assert clients.failures == [], clients.failures[:5]
    assert {"1", "2"} <= set(clients.versions)
    assert code == 0, server.log()
