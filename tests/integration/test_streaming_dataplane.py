"""Streams and /generate get what unary calls get, since every protocol is one call into the
data plane (issues 31 and 32): the routing header on /generate, classification on
ModelStreamInfer, a decoupled model's circuit breaker through a stream, and a stream's
``grpc-timeout``; over the built-in servers and the reference twins (uvicorn, grpcio)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from examples import modelgen
from examples.modelgen import decoupled
from inferplex.config.writers import write_config
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.h2client import H2Client, grpc_frame
from tests.support.streams import Collected

grpcclient = pytest.importorskip("tritonclient.grpc")

ROUTING = """
routes:
  ab:
    targets:
      - {model: add_sub, version: 1, weight: 1}
      - {model: add_sub, version: 2, weight: 1}
    sticky: true
"""

#: decoupled: fails every request (an execution error: what a breaker counts)
BROKEN = """
class TritonPythonModel:
    def execute(self, requests):
        raise RuntimeError("the broken model broke")
"""

BROKEN_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters [
  { key: "breaker_failures" value { string_value: "2" } },
  { key: "breaker_cooldown_s" value { string_value: "60" } }
]
"""

#: decoupled: answers after 20 s unless its request is cancelled first
SLEEPY = """
import time
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            end = time.monotonic() + 20
            while time.monotonic() < end and not request.is_cancelled():
                time.sleep(0.02)
            out = pb_utils.Tensor("OUT", np.array([1], np.int32))
            sender.send(
                pb_utils.InferenceResponse([out]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""

SLEEPY_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
DEADLINE_EXCEEDED = 4


def build(repo: Path) -> Path:
    for version in (1, 2):
        path = modelgen.add_sub(repo, version=version)
    config = modelgen.model_config(path, max_batch_size=8)
    write_config(repo / "add_sub", {**config, "version_policy": {"all": {}}})
    decoupled.write_model(repo, "broken", BROKEN, BROKEN_CONFIG)
    decoupled.write_model(repo, "sleepy", SLEEPY, SLEEPY_CONFIG)
    (repo / "routing.yaml").write_text(ROUTING)
    return repo


@pytest.fixture(scope="module", params=["builtin", "reference"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repo = build(tmp_path_factory.mktemp(f"streams_{request.param}"))
    args = ["--routing-header", "x-user"]
    if request.param == "reference":
        args += ["--http-server", "uvicorn", "--grpc-server", "grpcio"]
    running = start_server(repo, repo.parent / "server.log", args=args)
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def add_sub_inputs(values: np.ndarray) -> list[Any]:
    inputs = [grpcclient.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values.reshape(1, 16))
    return inputs


def test_generate_honours_the_routing_header(server: RunningServer) -> None:
    """A sticky route answers every /generate request with one key from the same target,
    as /infer does: the header is the request's routing key."""
    body = {"INPUT0": list(range(16)), "INPUT1": list(range(16))}
    url = f"http://{server.http_url}/v2/models/ab/generate"

    def version(key: str) -> str:
        reply = requests.post(url, json=body, headers={"x-user": key}, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.json()["OUTPUT0"] == [2 * i for i in range(16)]
        return str(reply.json()["model_version"])

    by_key = {f"u{i}": version(f"u{i}") for i in range(16)}
    assert all(version(key) == chosen for key, chosen in by_key.items())
    assert set(by_key.values()) == {"1", "2"}


def test_stream_answers_an_output_asked_as_its_top_classes(server: RunningServer) -> None:
    """image_client -i grpc --streaming -c 3: the classes come as over ModelInfer."""
    values = np.array([3, 9, 1, 7, 0, 5, 2, 8, 4, 6, 0, 0, 0, 0, 0, 0], np.float32)
    classes = [grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    received = Collected()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        unary = client.infer("add_sub", add_sub_inputs(values), outputs=classes)
        client.start_stream(callback=received.callback)
        client.async_stream_infer(
            "add_sub", add_sub_inputs(values), outputs=classes, request_id="c3"
        )
        ((result, error),) = received.take(1)
        client.stop_stream()
    assert error is None, error
    expected = [b"18.000000:1", b"16.000000:7", b"14.000000:3"]
    assert result.as_numpy("OUTPUT0").tolist() == [expected]
    assert unary.as_numpy("OUTPUT0").tolist() == [expected]
    assert result.get_response().id == "c3"


def test_a_failing_decoupled_model_opens_its_breaker_through_a_stream(
    server: RunningServer,
) -> None:
    """Two execution failures on a stream open the breaker: the third request is refused
    without reaching the model, and the model's statistics show the breaker open."""
    received = Collected()
    messages = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=received.callback)
        for number in range(3):
            tensor = grpcclient.InferInput("IN", [1], "INT32")
            tensor.set_data_from_numpy(np.array([number], np.int32))
            client.async_stream_infer("broken", [tensor], request_id=str(number))
            ((_, error),) = received.take(1)
            assert error is not None
            messages.append(error.message())
        client.stop_stream()
    assert all("the broken model broke" in message for message in messages[:2]), messages
    assert messages[2].startswith("model 'broken' is failing: circuit breaker open"), messages
    stats = requests.get(f"http://{server.http_url}/v2/models/broken/stats", timeout=10).json()
    assert stats["model_stats"][0]["circuit_breaker"]["state"] == "OPEN"


def test_a_streams_deadline_ends_it_with_deadline_exceeded(server: RunningServer) -> None:
    """grpc-timeout on ModelStreamInfer: when it passes with a request still running, the
    call ends with DEADLINE_EXCEEDED (its status, as a gRPC server ends any call past its
    deadline) and the server goes on serving."""
    request = pb.ModelInferRequest(
        model_name="sleepy",
        id="late",
        inputs=[{"name": "IN", "datatype": "INT32", "shape": [1]}],
        raw_input_contents=[np.array([1], np.int32).tobytes()],
    )
    with H2Client(server.grpc_port) as client:
        stream_id = client.open_stream(STREAM, extra=[(b"grpc-timeout", b"300m")])
        client.send_body(stream_id, grpc_frame(request.SerializeToString()), end_stream=False)
        call = client.wait_finished(stream_id)
        call.assert_grpc_error(DEADLINE_EXCEEDED)
        assert not call.messages()  # the model's answer never came
        client.live()
