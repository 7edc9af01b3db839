"""`inferplex serve` started with a tritonserver start script's command line (issue 20 §4)
comes up with what those flags say: Triton's spellings, explicit control with its models,
no auto-complete, no metrics listener; the flags without effect are named in the log; with
--exit-on-error=true a model that fails to load stops the start."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import HOST, RunningServer, free_port, wait_ready
from tests.support.repository import BROKEN_CONFIG

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repository")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    modelgen.add_sub(repo, name="no_config")  # needs auto-complete: refused without it
    # a config taken as written that leaves out the graph's INPUT1: the load fails
    lacking = modelgen.model_config(modelgen.add_sub(repo, name="lacking"), max_batch_size=8)
    write_config(repo / "lacking", {**lacking, "input": lacking["input"][:1]})
    modelgen.add_sub(repo, name="not_asked")  # not named by --load-model
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [
        sys.executable, "-m", "inferplex", "serve",
        f"--model-repository={repo}",
        "--strict-model-config=false",
        "--disable-auto-complete-config",
        "--log-verbose=1",
        "--exit-on-error=false",
        "--backend-config=onnxruntime,default-max-batch-size=4",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=no_config",
        "--load-model=lacking",
        "--allow-grpc=true",
        "--allow-http=true",
        "--allow-metrics=false",
    ]  # fmt: skip
    log_path = tmp_path_factory.mktemp("log") / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    running = RunningServer(process, repo, http, grpc, metrics, log_path)
    wait_ready(running, 120)
    yield running
    assert running.stop() == 0, running.log()


def test_the_server_runs_with_the_triton_flags(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert http.is_server_ready() and grpc.is_server_ready()  # --allow-grpc=true
        assert http.is_model_ready("add_sub")  # --load-model, in explicit control mode
        index = {m["name"]: m for m in http.get_model_repository_index()}
        assert index["not_asked"].get("state", "") != "READY"
        # --disable-auto-complete-config: a model without a config file is refused
        assert index["no_config"]["state"] == "UNAVAILABLE"
        assert "not completed" in index["no_config"]["reason"]
        # checked against the ONNX graph all the same, in Triton's onnxruntime words
        assert index["lacking"]["state"] == "UNAVAILABLE"
        reason = index["lacking"]["reason"]
        assert "configuration expects 1 inputs, model provides 2" in reason
        assert "'INPUT1'" in reason
    finally:
        http.close()
        grpc.close()
    with socket.socket() as probe:  # --allow-metrics=false: nothing listens there
        assert probe.connect_ex((HOST, server.metrics_port)) != 0


def test_a_flag_without_effect_says_so_in_the_log(server: RunningServer) -> None:
    (line,) = [x for x in server.log().splitlines() if "tritonserver's --backend-config" in x]
    assert "no effect" in line


def test_exit_on_error_stops_the_start_naming_the_model(tmp_path: Path) -> None:
    path = modelgen.add_sub(tmp_path)
    write_config(tmp_path / "add_sub", modelgen.model_config(path, max_batch_size=8))
    modelgen.add_sub(tmp_path, name="broken")
    (tmp_path / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    command = [
        sys.executable, "-m", "inferplex", "serve", f"--model-repository={tmp_path}",
        "--http-port=0", "--grpc-port=0", "--metrics-port=0", "--exit-on-error=true",
    ]  # fmt: skip
    ended = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert ended.returncode == 2, ended.stderr
    assert "failed to load at start (--exit-on-error): 'broken':" in ended.stderr
