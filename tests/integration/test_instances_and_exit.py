"""One instance-count cap for every way a count is set, and an exit no load can hold
(issue 30).

A load's config override asking for ``instance_group { count: 100000 }`` was accepted (7 GB
and growing) while ``/instances`` capped at 64; SIGTERM then waited on the load forever.
Now ``--max-model-instances`` bounds the config file (pbtxt and YAML), a load's config, and
the instances endpoint alike (400 naming it), and ``--exit-timeout-secs`` bounds the exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from examples.modelgen.decoupled import write_model
from inferplex.lifecycle.exit_deadline import EXIT_STATUS
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.lifecycle import add_model, add_sub_config, wait_until

#: the cap the servers here run with
CAP = 4


def post(server: RunningServer, path: str, body: object = None) -> requests.Response:
    data = None if body is None else json.dumps(body)
    return requests.post(f"http://{server.http_url}{path}", data=data, timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("instances")
    add_model(repo)
    add_model(repo, "many_pbtxt", instance_group=[{"count": 100000, "kind": "KIND_CPU"}])
    add_model(repo, "many_yaml")
    (repo / "many_yaml" / "config.pbtxt").unlink()
    config = add_sub_config(repo, "many_yaml", instance_group=[{"count": CAP + 1}])
    (repo / "many_yaml" / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    running = start_server(
        repo,
        repo / "server.log",
        env={"INFERPLEX_MAX_MODEL_INSTANCES": str(CAP)},
        args=["--model-control-mode", "explicit"],
    )
    yield running
    assert running.stop() == 0, running.log()


def assert_refused(response: requests.Response) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"above the limit of {CAP} (--max-model-instances" in error, error


@pytest.mark.parametrize("model", ["many_pbtxt", "many_yaml"])
def test_a_config_file_over_the_cap_is_refused(server: RunningServer, model: str) -> None:
    assert_refused(post(server, f"/v2/repository/models/{model}/load"))


def test_a_load_override_over_the_cap_is_refused(server: RunningServer) -> None:
    groups = [{"count": 100000, "kind": "KIND_CPU"}]
    config = json.dumps({"backend": "onnxruntime", "instance_group": groups})
    body = {"parameters": {"config": config}}
    assert_refused(post(server, "/v2/repository/models/add_sub/load", body))
    # the groups add up: two of CAP are over it too
    groups = [{"count": CAP, "kind": "KIND_CPU"}] * 2
    config = json.dumps({"backend": "onnxruntime", "instance_group": groups})
    body = {"parameters": {"config": config}}
    assert_refused(post(server, "/v2/repository/models/add_sub/load", body))


def test_a_grpc_load_override_over_the_cap_is_refused(server: RunningServer) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    groups = [{"count": 100000, "kind": "KIND_CPU"}]
    config = json.dumps({"backend": "onnxruntime", "instance_group": groups})
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as caught,
    ):
        client.load_model("add_sub", config=config)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert f"above the limit of {CAP} (--max-model-instances" in caught.value.message()


def test_the_instances_endpoint_has_the_same_cap(server: RunningServer) -> None:
    assert post(server, "/v2/repository/models/add_sub/load").status_code == 200
    path = "/v2/repository/models/add_sub/instances"
    assert_refused(post(server, path, {"count": CAP + 1}))
    assert post(server, path, {"count": CAP}).status_code == 200


#: initialize writes the worker's pid, then blocks far longer than any test
SLEEPER = """
import os
import time

class TritonPythonModel:
    def initialize(self, args):
        with open(args["model_repository"] + "/pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)

    def execute(self, requests):
        return []
"""
SLEEPER_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: --exit-timeout-secs of the test below, and how long past it the exit may take on a busy
#: machine (a liveness bound, not a speed measurement: without the deadline it never comes)
EXIT_TIMEOUT = 2.0
EXIT_SLACK = 20.0


def test_sigterm_during_a_load_that_blocks_exits_within_the_deadline(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    folder = write_model(repo, "sleeper", SLEEPER, SLEEPER_CONFIG)
    server = start_server(
        repo,
        tmp_path / "server.log",
        args=["--model-control-mode", "explicit", "--exit-timeout-secs", str(EXIT_TIMEOUT)],
    )
    pid_file = folder / "pid"
    try:
        loading = threading.Thread(
            target=lambda: _quietly(post, server, "/v2/repository/models/sleeper/load"), daemon=True
        )
        loading.start()
        wait_until(lambda: pid_file.exists() and pid_file.read_text() != "", 60, "initialize runs")
        worker = int(pid_file.read_text())
        start = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(EXIT_TIMEOUT + EXIT_SLACK)
        assert time.monotonic() - start < EXIT_TIMEOUT + EXIT_SLACK
        assert code == EXIT_STATUS, server.log()
        assert "--exit-timeout-secs" in server.log()
        # the worker stuck in initialize is killed, not left behind
        wait_until(lambda: not _alive(worker), 10, "the worker is gone")
    finally:  # a server that did not exit is not left behind, nor its worker
        if server.process.poll() is None:
            server.process.kill()
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _quietly(call: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(requests.RequestException):  # the server goes away mid-load
        call(*args)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its dead parent's reaper) is gone for our purpose
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"
