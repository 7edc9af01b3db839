"""One real start with the tritonserver flags inferplex honours that have effects a client
sees (issue 31): --id names the server in ServerMetadata, --log-file and --log-format=ISO8601
write the log there in that form, --model-config-name serves configs/NAME.pbtxt, whose
response cache --cache-config sizes, and --strict-readiness keeps the server not ready while
a model asked for has failed its load (ready again once it is unloaded)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.writers import to_pbtxt, write_config
from inferplex_tools.benchtool.launch import RunningServer, free_port
from tests.support.repository import BROKEN_CONFIG

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

#: a Python model whose worker process logs at start (its line must reach --log-file too)
GREETER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_warn("greeter's worker says hello")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
GREETER_CONFIG = """
name: "greeter"
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("repository")
    path = modelgen.add_sub(repo, dims=4)
    config = modelgen.model_config(path, max_batch_size=8)
    write_config(repo / "add_sub", config)
    (repo / "add_sub" / "configs").mkdir()
    variant = {**config, "response_cache": {"enable": True}}
    (repo / "add_sub" / "configs" / "cached.pbtxt").write_text(to_pbtxt(variant))
    (repo / "greeter" / "1").mkdir(parents=True)
    (repo / "greeter" / "1" / "model.py").write_text(GREETER)
    (repo / "greeter" / "config.pbtxt").write_text(GREETER_CONFIG)
    modelgen.add_sub(repo, name="broken")
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    http, grpc, metrics = free_port(), free_port(), free_port()
    logs = tmp_path_factory.mktemp("log")
    command = [
        sys.executable, "-m", "inferplex", "serve",
        f"--model-repository={repo}",
        "--id=triton",
        f"--log-file={logs / 'inferplex.log'}",
        "--log-format=ISO8601",
        "--model-config-name=cached",
        "--cache-config=local,size=1048576",
        "--strict-readiness=true",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=broken",
        "--load-model=greeter",
        f"--http-port={http}",
        f"--grpc-port={grpc}",
        f"--metrics-port={metrics}",
    ]  # fmt: skip
    with (logs / "stderr.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    running = RunningServer(process, repo, http, grpc, metrics, logs / "stderr.log")
    _wait_for_model(running, "add_sub", 120)
    _wait_for_model(running, "greeter", 120)
    yield running
    assert running.stop() == 0, running.log()


def _wait_for_model(server: RunningServer, model: str, seconds: float) -> None:
    """Up to ``seconds`` for ``model`` to be ready (the server itself is not, strictly)."""
    client = httpclient.InferenceServerClient(server.http_url)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            assert server.process.poll() is None, server.log()
            try:
                if client.is_model_ready(model):
                    return
            except Exception:  # not listening yet
                pass
            time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError(f"{model} not ready in {seconds} s: {server.log()}")


def test_id_is_the_name_server_metadata_answers_with(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert http.get_server_metadata()["name"] == "triton"
        assert grpc.get_server_metadata().name == "triton"
    finally:
        http.close()
        grpc.close()


def test_the_config_variant_is_served_with_the_cache_sized_by_cache_config(
    server: RunningServer,
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.get_model_config("add_sub")["response_cache"]["enable"] is True
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
            inputs.append(tensor)
        for _ in range(2):
            client.infer("add_sub", inputs)
        (stats,) = client.get_inference_statistics("add_sub")["model_stats"]
        assert stats["inference_stats"]["cache_hit"]["count"] == 1
    finally:
        client.close()


def test_the_log_goes_to_the_log_file_in_iso8601(server: RunningServer) -> None:
    lines = (Path(server.log_path).parent / "inferplex.log").read_text().splitlines()
    ready = [line for line in lines if "model 'add_sub' READY" in line]
    assert ready and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO ", ready[0])
    assert "model 'add_sub' READY" not in server.log()  # not on stderr
    assert any("greeter's worker says hello" in line for line in lines)  # a worker's too


def test_strict_readiness_waits_for_every_model_asked_for(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert http.is_server_live() and not http.is_server_ready()
        assert not grpc.is_server_ready()
        http.unload_model("broken")  # unloaded, as in Triton, no longer counts
        assert http.is_server_ready() and grpc.is_server_ready()
    finally:
        http.close()
        grpc.close()
