"""One data plane for REST, gRPC and the in-process API (issue 19, item 2): what a request
goes through between the codecs and the engine is the same whichever way it came, on the
built-in servers and on their reference twins. Triton's own clients drive both protocols."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from inferplex.config.server_config import ServerConfig
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.server import Server
from inferplex.types import InferenceRequest, RequestedOutput, Tensor
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.integration.test_routing import build_repository

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

#: add_sub's OUTPUT0 for INPUT0 = INPUT1 = 0..15 is 0, 2, .., 30: its top three classes
TOP_THREE = [[b"30.000000:15", b"28.000000:14", b"26.000000:13"]]

#: infer(outputs: [(name, class_count)]) over one protocol
Infer = Callable[[list[tuple[str, int]]], dict[str, np.ndarray]]


@pytest.fixture(params=["rest", "grpc"])
def infer(request: pytest.FixtureRequest, twin_server: RunningServer) -> Iterator[Infer]:
    """add_sub over REST, then over gRPC, with tritonclient; the outputs it answers."""
    module = httpclient if request.param == "rest" else grpcclient
    url = twin_server.http_url if request.param == "rest" else twin_server.grpc_url
    client = module.InferenceServerClient(url)
    data = np.arange(16, dtype=np.float32).reshape(1, 16)

    def call(outputs: list[tuple[str, int]]) -> dict[str, np.ndarray]:
        inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        requested = [module.InferRequestedOutput(n, class_count=c) for n, c in outputs]
        result = client.infer("add_sub", inputs, outputs=requested)
        return {name: result.as_numpy(name) for name, _ in outputs}

    yield call
    client.close()


def test_outputs_without_classification_are_the_tensors(infer: Infer) -> None:
    answer = infer([("OUTPUT0", 0), ("OUTPUT1", 0)])
    assert answer["OUTPUT0"].tolist() == [[2.0 * i for i in range(16)]]
    assert answer["OUTPUT1"].tolist() == [[0.0] * 16]


def test_classification_answers_alike_over_every_protocol(infer: Infer) -> None:
    # gRPC used to ignore the parameter and answer the whole tensor, REST refused it
    answer = infer([("OUTPUT0", 3), ("OUTPUT1", 0)])
    assert answer["OUTPUT0"].tolist() == TOP_THREE  # [batch, 3] BYTES, as Triton answers
    assert answer["OUTPUT1"].tolist() == [[0.0] * 16]
    again = infer([("OUTPUT0", 3), ("OUTPUT1", 0)])  # a layout seen before: the same
    assert again["OUTPUT0"].tolist() == TOP_THREE


def test_a_bad_class_count_is_refused_alike_over_every_protocol(infer: Infer) -> None:
    with pytest.raises(InferenceServerException) as refused:
        infer([("OUTPUT0", -1)])
    assert "output 'OUTPUT0': parameter 'classification' must be a non-negative integer" in (
        refused.value.message()
    )


@pytest.fixture(scope="module")
def in_process(test_repository: Path) -> Iterator[Server]:
    config = ServerConfig(
        model_repository=test_repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        max_tensor_elements=64,
    )
    with Server(config) as server:
        yield server


def add_sub_request(shape: tuple[int, ...] = (1, 16), **output: Any) -> InferenceRequest:
    data = np.ones(shape if min(shape) >= 0 else (1, 16), np.float32)
    inputs = [Tensor(name, "FP32", shape, data) for name in ("INPUT0", "INPUT1")]
    outputs = [RequestedOutput("OUTPUT0", output)] if output else []
    return InferenceRequest("add_sub", inputs, outputs=outputs)


def test_the_in_process_api_goes_through_the_same_plane(in_process: Server) -> None:
    assert in_process.infer(add_sub_request()).outputs[0].data.tolist() == [[2.0] * 16]
    classes = in_process.infer(add_sub_request(classification=2)).outputs[0]
    assert (classes.datatype, classes.shape) == ("BYTES", (1, 2))
    assert classes.data.tolist() == [[b"2.000000:0", b"2.000000:1"]]
    with pytest.raises(InvalidInputError, match="'classification' must be a non-negative"):
        in_process.infer(add_sub_request(classification=-2))
    with pytest.raises(PayloadTooLargeError, match=r"INPUT0.*65 elements.*64"):
        in_process.infer(add_sub_request((1, 65)))
    with pytest.raises(InvalidInputError, match=r"INPUT0.*'shape' \[-1, 16\].*negative"):
        in_process.infer(add_sub_request((-1, 16)))


def test_classes_carry_the_labels_of_the_outputs_label_file(
    test_repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repository"
    shutil.copytree(test_repository / "add_sub", repo / "add_sub")
    config = repo / "add_sub" / "config.pbtxt"
    labelled = 'name: "OUTPUT0"\n    label_filename: "labels.txt"'
    config.write_text(config.read_text().replace('name: "OUTPUT0"', labelled, 1))
    (repo / "add_sub" / "labels.txt").write_text("".join(f"class {i}\n" for i in range(16)))
    settings = ServerConfig(model_repository=repo, http_port=0, grpc_port=0, metrics_port=0)
    with Server(settings) as server:
        served = server.engine.model_config("add_sub").output[0]
        assert served.label_filename == "labels.txt"
        data = np.arange(16, dtype=np.float32).reshape(1, 16)
        for protocol in (httpclient, grpcclient):
            url = f"127.0.0.1:{server.http_port if protocol is httpclient else server.grpc_port}"
            client = protocol.InferenceServerClient(url)
            inputs = [protocol.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(data)
            output = protocol.InferRequestedOutput("OUTPUT0", class_count=2)
            result = client.infer("add_sub", inputs, outputs=[output])
            client.close()
            assert result.as_numpy("OUTPUT0").tolist() == [
                [b"30.000000:15:class 15", b"28.000000:14:class 14"]
            ]


# -- the routing key ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server with test_routing.py's routes and the routing header X-User."""
    repo = build_repository(tmp_path_factory.mktemp("routed_repository"))
    log = tmp_path_factory.mktemp("routed_server") / "server.log"
    running = start_server(repo, log, env={"INFERPLEX_ROUTING_HEADER": "X-User"})
    yield running
    assert running.stop() == 0, running.log()


def version_over_json(server: RunningServer, key: str) -> str:
    data = list(range(16))
    body = {
        "inputs": [
            {"name": name, "datatype": "FP32", "shape": [1, 16], "data": data}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    reply = requests.post(
        f"http://{server.http_url}/v2/models/ab/infer", json=body, headers={"x-user": key}
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["model_version"])


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_the_routing_header_is_the_same_key_over_both_protocols(
    routed: RunningServer, protocol: str
) -> None:
    """The routing header over HTTP, the metadata key of the same name over gRPC: the same
    key reaches the same version of a sticky route (gRPC used to drop it, and each request
    went by the weights alone)."""
    module = httpclient if protocol == "rest" else grpcclient
    client = module.InferenceServerClient(
        routed.http_url if protocol == "rest" else routed.grpc_url
    )
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)

    def version(key: str) -> str:
        response = client.infer("ab", inputs, headers={"x-user": key}).get_response()
        return str(response["model_version"] if protocol == "rest" else response.model_version)

    try:
        keys = [f"k{i}" for i in range(24)]
        expected = {key: version_over_json(routed, key) for key in keys}
        assert set(expected.values()) == {"1", "2"}  # 24 keys at 3:1 reach both versions
        for _ in range(2):
            assert {key: version(key) for key in keys} == expected
    finally:
        client.close()
