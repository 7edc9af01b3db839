"""gRPC ModelStreamInfer against a real server, on the built-in gRPC server and its grpcio
twin, with Triton's clients: tritonclient's ``start_stream`` / ``async_stream_infer`` (sync)
and ``stream_infer`` (aio) the way Triton's decoupled example clients (square, repeat) use
them, an ordinary ONNX model over the stream, errors in the stream, a client that cancels
(the model sees it), a client that does not read (the model is held back), the bound on
requests in flight per stream, and ``perf_analyzer --streaming``. No timing is asserted."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from examples import modelgen
from examples.modelgen import decoupled
from inferplex.config.writers import write_config
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.perf_analyzer import run_perf_analyzer
from tests.support.polling import wait_for
from tests.support.streams import Collected

grpcclient = pytest.importorskip("tritonclient.grpc")
grpcaio = pytest.importorskip("tritonclient.grpc.aio")

#: decoupled: IN = [count, bytes per response]; sends ``count`` responses of that many bytes
#: (an UINT8 output), writing how many it sent to its progress file, and stops once its
#: client went away (writing "cancelled")
FLOOD = """
import json
import os
import numpy as np
from inferplex.handler import triton as pb_utils

def note(path, text):
    # whole or not at all: a reader never sees the file emptied for the next count
    with open(path + ".new", "w") as file:
        file.write(text)
    os.replace(path + ".new", path)

class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.progress = parameters["progress"]["string_value"]

    def execute(self, requests):
        for request in requests:
            count, size = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            block = pb_utils.Tensor("OUT", np.zeros(size, np.uint8))
            for i in range(count):
                if request.is_cancelled():
                    note(self.progress, "cancelled")
                    break
                sender.send(pb_utils.InferenceResponse([block]))
                note(self.progress, str(i + 1))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

FLOOD_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
parameters [ {{ key: "progress" value {{ string_value: "{progress}" }} }} ]
"""

#: decoupled, four instances: each request marks its start in the folder MARKS names and
#: answers once the file RELEASE names exists
HELD = """
import json, os, time
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.marks = parameters["marks"]["string_value"]
        self.release = parameters["release"]["string_value"]

    def execute(self, requests):
        for request in requests:
            open(os.path.join(self.marks, request.request_id()), "w").close()
            while not os.path.exists(self.release):
                time.sleep(0.01)
            out = pb_utils.Tensor("OUT", np.array([1], np.int32))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([out]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""

HELD_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 4 }} ]
parameters [
  {{ key: "marks" value {{ string_value: "{marks}" }} }},
  {{ key: "release" value {{ string_value: "{release}" }} }}
]
"""

MAX_REQUESTS = 2  # --stream-max-requests of these servers
MAX_MESSAGE = 4 << 20  # their --max-grpc-message-bytes
MB = 1 << 20


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        decoupled.square_int32(root)
        decoupled.repeat_int32(root)
        path = modelgen.add_sub(root)
        write_config(root / "add_sub", modelgen.model_config(path, max_batch_size=8))
        self.progress = root / "flood.progress"
        decoupled.write_model(root, "flood", FLOOD, FLOOD_CONFIG.format(progress=self.progress))
        self.marks, self.release = root / "marks", root / "release"
        self.marks.mkdir()
        config = HELD_CONFIG.format(marks=self.marks, release=self.release)
        decoupled.write_model(root, "held", HELD, config)


@pytest.fixture(scope="module", params=["builtin", "grpcio"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, Repo]]:
    repo = Repo(tmp_path_factory.mktemp(f"stream_{request.param}"))
    args = ["--grpc-server", request.param, "--stream-max-requests", str(MAX_REQUESTS)]
    args += ["--max-grpc-message-bytes", str(MAX_MESSAGE)]
    server = start_server(repo.root, repo.root.parent / "server.log", args=args)
    yield server, repo
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log()}"


def in_tensor(values: list[int], name: str = "IN", datatype: str = "INT32") -> Any:
    tensor = grpcclient.InferInput(name, [len(values)], datatype)
    tensor.set_data_from_numpy(np.array(values, np.int32 if datatype == "INT32" else np.uint32))
    return tensor


def test_square_answers_each_request_of_the_stream_as_tritons_client_expects(
    served: tuple[RunningServer, Repo],
) -> None:
    """square_client's steps: four requests in parallel on one stream, n responses each."""
    server, _ = served
    counts = [4, 2, 0, 1]
    received = Collected()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=received.callback)
        for i, n in enumerate(counts):
            client.async_stream_infer(
                "square_int32",
                [in_tensor([n])],
                request_id=str(i),
                outputs=[grpcclient.InferRequestedOutput("OUT")],
            )
        by_id: dict[str, list[list[int]]] = {}
        for result, error in received.take(sum(counts)):
            assert error is None
            by_id.setdefault(result.get_response().id, []).append(result.as_numpy("OUT").tolist())
        client.stop_stream()
    assert by_id == {"0": [[4]] * 4, "1": [[2]] * 2, "3": [[1]]}


async def test_repeat_over_the_aio_client_with_the_empty_final_response(
    served: tuple[RunningServer, Repo],
) -> None:
    """repeat_client's request through tritonclient.grpc.aio, asking for the final flag."""
    server, _ = served
    values = [4, 2, 0, 1]

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {
            "model_name": "repeat_int32",
            "inputs": [
                in_tensor(values),
                in_tensor([1, 2, 3, 4], "DELAY", "UINT32"),
                in_tensor([5], "WAIT", "UINT32"),
            ],
            "request_id": "0",
            # (this client's stream_infer takes it as the parameter Triton reads)
            "parameters": {"triton_enable_empty_final_response": True},
        }

    async with grpcaio.InferenceServerClient(server.grpc_url) as client:
        answers = []
        async for result, error in client.stream_infer(requests()):
            assert error is None
            answers.append(result)
            final = result.get_response().parameters["triton_final_response"].bool_param
            if final:
                break
    assert [a.get_response().id for a in answers] == ["0"] * 5
    assert [a.as_numpy("OUT").tolist() for a in answers[:4]] == [[v] for v in values]
    assert [a.as_numpy("IDX").tolist() for a in answers[:4]] == [[0], [1], [2], [3]]
    assert answers[4].as_numpy("OUT") is None  # the empty final response


def test_an_ordinary_model_answers_once_per_request_and_errors_go_in_the_stream(
    served: tuple[RunningServer, Repo],
) -> None:
    server, _ = served
    a = np.ones((1, 16), np.float32)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    received = Collected()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=received.callback)
        client.async_stream_infer("add_sub", inputs, request_id="one")
        client.async_stream_infer("no_such_model", inputs, request_id="missing")
        client.async_stream_infer("add_sub", inputs[:1], request_id="short")
        client.async_stream_infer("add_sub", inputs, request_id="two")
        items = received.take(4)
        client.stop_stream()
    errors = [str(error) for _, error in items if error is not None]
    answers = {r.get_response().id: r for r, error in items if error is None}
    assert sorted(answers) == ["one", "two"]
    for answer in answers.values():
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), a + a)
    assert len(errors) == 2
    assert any("unknown model: 'no_such_model'" in e for e in errors)
    assert any("INPUT1" in e for e in errors)


def test_a_client_that_cancels_the_stream_cancels_the_request_in_the_model(
    served: tuple[RunningServer, Repo],
) -> None:
    server, repo = served
    received = Collected()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=received.callback)
    client.async_stream_infer("flood", [in_tensor([10**6, 16])], request_id="long")
    received.take(1)  # it runs
    client.stop_stream(cancel_requests=True)
    client.close()
    wait_for(lambda: repo.progress.read_text() == "cancelled")


def test_a_client_that_does_not_read_holds_the_model_back(
    served: tuple[RunningServer, Repo],
) -> None:
    """200 responses of 1 MiB each to a client that reads none: the model gets no further
    than what the windows and the bounded queues hold (a few tens of MiB at most), then
    sends the rest as the client reads."""
    server, repo = served
    repo.progress.write_text("")
    count = 200
    request = pb.ModelInferRequest(
        model_name="flood",
        id="slow",
        inputs=[{"name": "IN", "datatype": "INT32", "shape": [2]}],
        raw_input_contents=[np.array([count, MB], np.int32).tobytes()],
    )
    with grpc.insecure_channel(
        server.grpc_url, options=[("grpc.max_receive_message_length", 2 * MB)]
    ) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        responses = call(iter([request]))
        first = next(responses)
        assert not first.error_message
        wait_for(lambda: repo.progress.read_text().isdigit())
        for _ in range(30):  # however long it is given, it gets no further
            time.sleep(0.05)
            sent = repo.progress.read_text()  # (empty: read while the model rewrites it)
            assert not sent or int(sent) < count // 2
        rest = [r for r in responses if not r.error_message]
    assert len(rest) == count - 1
    assert repo.progress.read_text() == str(count)


def test_a_stream_runs_at_most_its_bound_of_requests_at_once(
    served: tuple[RunningServer, Repo],
) -> None:
    """Four requests on one stream to a model with four instances: only
    --stream-max-requests of them reach it until one is answered."""
    server, repo = served
    for mark in repo.marks.iterdir():
        mark.unlink()
    repo.release.unlink(missing_ok=True)
    received = Collected()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=received.callback)
        for i in range(4):
            client.async_stream_infer("held", [in_tensor([i])], request_id=f"r{i}")
        wait_for(lambda: len(list(repo.marks.iterdir())) >= MAX_REQUESTS)
        for _ in range(20):
            time.sleep(0.05)
            assert len(list(repo.marks.iterdir())) == MAX_REQUESTS
        repo.release.touch()
        ids = sorted(result.get_response().id for result, _ in received.take(4))
        client.stop_stream()
    assert ids == ["r0", "r1", "r2", "r3"]


def test_a_message_above_the_size_limit_ends_the_stream(
    served: tuple[RunningServer, Repo],
) -> None:
    server, _ = served
    large = pb.ModelInferRequest(
        model_name="add_sub", id="large", raw_input_contents=[bytes(MAX_MESSAGE + 1)]
    )
    with grpc.insecure_channel(
        server.grpc_url, options=[("grpc.max_send_message_length", 2 * MAX_MESSAGE)]
    ) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(call(iter([large])))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_perf_analyzer_streams_a_decoupled_model(
    served: tuple[RunningServer, Repo], tmp_path: Path
) -> None:
    server, _ = served
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"data": [{"IN": [3]}]}))
    run_perf_analyzer(
        "square_int32", server.grpc_url, "grpc", ["--streaming", "--input-data", str(data)]
    )
