"""Models isolated in worker processes (parameter ``isolation: process``), over real sockets
with Triton's clients: they answer as in-process models do, each instance is a process that
unload ends, a crash or a hang fails only the batch in flight and the worker comes back, and
bad settings fail the load with a clear reason."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import pytest
import requests

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.lifecycle import add_model, wait_until

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

ISOLATED = {"key": "isolation", "value": {"string_value": "process"}}

#: an ensemble cannot be isolated: it only calls other models
PIPE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [16] }, { name: "B" data_type: TYPE_FP32 dims: [16] } ]
output [ { name: "sum" data_type: TYPE_FP32 dims: [16] } ]
ensemble_scheduling { step [
  { model_name: "add_sub_iso"
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } }
] }
parameters { key: "isolation" value: { string_value: "process" } }
"""  # noqa: E501

#: rows of the batch that keeps the crash test's model busy for a second or more
BUSY_ROWS = 4000


def _config(path: Path, *parameters: dict[str, Any], **fields: Any) -> dict[str, Any]:
    config = modelgen.model_config(path, **fields)
    config["parameters"] = [ISOLATED, *parameters]
    return config


def build(repo: Path) -> None:
    add_model(repo, "add_sub_iso", parameters=[ISOLATED], instance_group=[{"count": 2}])
    cnn = modelgen.small_cnn(repo, "cnn_iso", image_size=32, widths=(8, 16))
    # config.yaml takes the parameter as a plain map
    fields = modelgen.model_config(cnn, max_batch_size=4)
    write_config(repo / "cnn_iso", {**fields, "parameters": {"isolation": "process"}}, "yaml")
    mlp = modelgen.mlp(repo, "mlp_iso", features=16, hidden=(1024,) * 8)
    one_thread = {"key": "intra_op_thread_count", "value": {"string_value": "1"}}
    write_config(repo / "mlp_iso", _config(mlp, one_thread))
    slow = modelgen.slow(repo, "slow_iso", seconds=30)
    timeout = {"key": "execute_timeout_seconds", "value": {"string_value": "1"}}
    write_config(repo / "slow_iso", _config(slow, timeout))
    thread = [{"key": "isolation", "value": {"string_value": "thread"}}]
    add_model(repo, "bad_mode", parameters=thread)
    (repo / "pipe_iso" / "1").mkdir(parents=True)
    (repo / "pipe_iso" / "config.pbtxt").write_text(PIPE)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repository")
    build(repo)
    log = tmp_path_factory.mktemp("log") / "server.log"
    running = start_server(repo, log, env={"INFERPLEX_MODEL_CONTROL_MODE": "explicit"})
    yield running
    left = workers(running)
    assert running.stop() == 0, running.log()
    assert not any(psutil.pid_exists(p) for p in left)  # shutdown ended every worker


def workers(server: RunningServer) -> set[int]:
    """The server's worker processes (isolated models' and Python models')."""
    found = set()
    for child in psutil.Process(server.process.pid).children():
        try:
            if "inferplex.backends.python.worker" in child.cmdline():
                found.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def load(server: RunningServer, model: str) -> set[int]:
    """Load ``model``; the worker processes that appeared meanwhile."""
    before = workers(server)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.load_model(model)
    return workers(server) - before


def unload(server: RunningServer, model: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.unload_model(model)


def infer(server: RunningServer, transport: str, model: str, arrays: dict[str, np.ndarray]) -> Any:
    module = httpclient if transport == "http" else grpcclient
    url = server.http_url if transport == "http" else server.grpc_url
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client = module.InferenceServerClient(url)
    try:
        return client.infer(model, inputs)
    finally:
        client.close()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_isolated_models_answer_as_in_process_ones(server: RunningServer, transport: str) -> None:
    load(server, "add_sub_iso")
    load(server, "cnn_iso")
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.float32)
    result = infer(server, transport, "add_sub_iso", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    images = np.random.default_rng(1).standard_normal((3, 3, 32, 32)).astype(np.float32)
    result = infer(server, transport, "cnn_iso", {"image": images})
    session = ort.InferenceSession(str(server.repository / "cnn_iso" / "1" / "model.onnx"))
    (expected,) = session.run(["logits"], {"image": images})
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-5, atol=1e-5)


def test_each_instance_is_a_process_that_unload_ends(server: RunningServer) -> None:
    unload(server, "add_sub_iso")
    started = load(server, "add_sub_iso")
    assert len(started) == 2  # instance_group count 2: two worker processes
    memory = requests.get(f"http://{server.http_url}/v2/repository/memory", timeout=30).json()
    (model,) = [m for m in memory["models"] if m["name"] == "add_sub_iso"]
    # the footprint counts the workers' memory (an interpreter and ONNX Runtime each)
    resident = sum(psutil.Process(pid).memory_info().rss for pid in started)
    assert model["bytes"] >= resident // 2, (model, resident)
    unload(server, "add_sub_iso")
    wait_until(lambda: not any(psutil.pid_exists(p) for p in started), what="workers gone")


def test_a_crash_fails_the_batch_in_flight_then_the_worker_comes_back(
    server: RunningServer,
) -> None:
    (pid,) = load(server, "mlp_iso")
    others = workers(server) - {pid}
    worker = psutil.Process(pid)
    idle = sum(worker.cpu_times()[:2])
    outcome: list[Any] = []
    done = threading.Event()
    busy = np.ones((BUSY_ROWS, 16), dtype=np.float32)
    tensor = grpcclient.InferInput("features", list(busy.shape), "FP32")
    tensor.set_data_from_numpy(busy)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:

        def answered(result: Any, error: Any) -> None:
            outcome.append(error)
            done.set()

        client.async_infer("mlp_iso", [tensor], answered)
        # the worker computes once the batch reached it: kill it in the middle
        wait_until(lambda: sum(worker.cpu_times()[:2]) > idle + 0.05, what="batch running")
        os.kill(pid, signal.SIGKILL)
        assert done.wait(60)
    (error,) = outcome
    assert error is not None and error.status() == "StatusCode.INTERNAL"
    assert (
        "model 'mlp_iso': the onnxruntime backend's worker process died while running the "
        "request (killed by signal SIGKILL); it was restarted" in error.message()
    )
    result = infer(server, "http", "mlp_iso", {"features": busy[:1]})
    assert result.as_numpy("logits").shape == (1, 10)
    (replacement,) = workers(server) - others
    assert replacement != pid
    unload(server, "mlp_iso")
    wait_until(lambda: not psutil.pid_exists(replacement), what="the replacement gone")


def test_a_hang_fails_the_batch_and_replaces_the_worker(server: RunningServer) -> None:
    (pid,) = load(server, "slow_iso")
    with pytest.raises(InferenceServerException) as caught:
        infer(server, "http", "slow_iso", {"INPUT0": np.zeros(4, dtype=np.float32)})
    assert (
        "model 'slow_iso': the onnxruntime backend did not answer within 1 s (parameter "
        "execute_timeout_seconds); its worker process was restarted" in caught.value.message()
    )
    assert caught.value.status() == "500"
    assert not psutil.pid_exists(pid)
    unload(server, "slow_iso")


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        ("bad_mode", "parameter isolation must be one of 'none', 'process', got 'thread'"),
        ("pipe_iso", "parameter isolation 'process' applies to backends that run a model"),
    ],
)
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_bad_isolation_settings_fail_the_load(
    server: RunningServer, transport: str, model: str, reason: str
) -> None:
    if transport == "http":
        url = f"http://{server.http_url}/v2/repository/models/{model}/load"
        response = requests.post(url, timeout=30)
        assert response.status_code == 400
        assert reason in response.json()["error"]
    else:
        with (
            grpcclient.InferenceServerClient(server.grpc_url) as client,
            pytest.raises(InferenceServerException) as caught,
        ):
            client.load_model(model)
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert reason in caught.value.message()
