"""A client that goes away while a Python handler runs its request: the handler sees
``is_cancelled()`` turn true (Triton's ``request.is_cancelled()``, the native
``context.is_cancelled()``), over HTTP/1.1 (the connection closed) and gRPC (the stream reset
with RST_STREAM CANCEL), served by a real ``inferplex serve`` process.

Each handler waits for the cancellation with a 60 s safety bound and then leaves a file
saying what it saw; a test waits 20 s at most for the file that says "cancelled". Without
the notice, no handler sees it before its bound and every test here fails.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests

from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

#: how long a test waits for a handler to start and to see its cancellation (generous: the
#: handlers poll every 10 ms)
TIMEOUT = 20.0

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
dynamic_batching {{ }}
"""

#: Triton style: a request whose INPUT0 is 1 waits until it is cancelled (60 s at most),
#: then answers with Triton's CANCELLED error, as Triton's documentation suggests
TRITON = """
import time
from pathlib import Path
from inferplex.handler import triton as pb_utils

MARKS = Path(__MARKS__)

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x[0, 0] == 1:
                (MARKS / (request.request_id() + ".started")).touch()
                deadline = time.monotonic() + 60
                while not request.is_cancelled() and time.monotonic() < deadline:
                    time.sleep(0.01)
                seen = "cancelled" if request.is_cancelled() else "not_cancelled"
                (MARKS / (request.request_id() + "." + seen)).touch()
                error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""

#: TorchServe style: a batch whose first value is 1 waits until all of it is cancelled (60 s
#: at most), then gives up with an exception (no traceback is logged for such a batch)
NATIVE = """
import time
from pathlib import Path
from inferplex.handler import BaseHandler

MARKS = Path(__MARKS__)

class Handler(BaseHandler):
    def inference(self, data):
        x = data["INPUT0"]
        if x[0, 0] == 1:
            name = self.context.get_request_id(0)
            (MARKS / (name + ".started")).touch()
            deadline = time.monotonic() + 60
            while not self.context.is_cancelled() and time.monotonic() < deadline:
                time.sleep(0.01)
            seen = "cancelled" if self.context.is_cancelled(0) else "not_cancelled"
            (MARKS / (name + "." + seen)).touch()
            raise RuntimeError("nobody waits for this batch: giving up")
        return {"OUTPUT0": x * 2}
"""

STYLES = {"triton": TRITON, "native": NATIVE}


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("cancel_repo")
    for style, code in STYLES.items():
        (repo / style / "1").mkdir(parents=True)
        (repo / style / "1" / "model.py").write_text(code.replace("__MARKS__", repr(str(marks))))
        (repo / style / "config.pbtxt").write_text(CONFIG.format(name=style))
    running = start_server(repo, tmp_path_factory.mktemp("cancel_log") / "server.log")
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def wait_for(path: Path, server: RunningServer) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        others = sorted(p.name for p in path.parent.glob(path.stem + ".*"))
        assert time.monotonic() < deadline, f"no {path.name} after {TIMEOUT} s (found {others})"
        assert server.process.poll() is None, server.log()
        time.sleep(0.01)


def cancelled_count(server: RunningServer, model: str) -> float:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=TIMEOUT).text
    pattern = rf'inferplex_inference_request_cancelled\{{model="{model}",version="1"\}} (\S+)'
    match = re.search(pattern, text)
    assert match, text
    return float(match.group(1))


def answers(server: RunningServer, model: str) -> None:
    """The model still answers a request of its own (the cancelled one broke nothing)."""
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [3]}]}
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    answer = requests.post(url, json=body, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"][0]["data"] == [6.0]


@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_closed_http_connection_is_seen_by_the_running_handler(
    server: RunningServer, marks: Path, style: str
) -> None:
    name = f"http-{style}-{uuid.uuid4().hex[:8]}"
    before = cancelled_count(server, style)
    body = json.dumps(
        {
            "id": name,
            "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1]}],
        }
    ).encode()
    head = (
        f"POST /v2/models/{style}/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((HOST, server.http_port)) as client:
        client.sendall(head.encode() + body)
        wait_for(marks / f"{name}.started", server)
    # the connection is closed while the handler runs the request
    wait_for(marks / f"{name}.cancelled", server)
    assert not (marks / f"{name}.not_cancelled").exists()
    assert cancelled_count(server, style) == before + 1
    answers(server, style)
    assert "Traceback" not in server.log()  # the dropped result made no noise


@pytest.mark.parametrize("style", sorted(STYLES))
def test_a_reset_grpc_stream_is_seen_by_the_running_handler(
    server: RunningServer, marks: Path, style: str
) -> None:
    name = f"grpc-{style}-{uuid.uuid4().hex[:8]}"
    before = cancelled_count(server, style)
    request = pb.ModelInferRequest(
        model_name=style,
        id=name,
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1]}],
        raw_input_contents=[np.ones(1, "<f4").tobytes()],
    )
    with grpc.insecure_channel(server.grpc_url) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        call = infer.future(request, timeout=TIMEOUT * 3)
        wait_for(marks / f"{name}.started", server)
        assert call.cancel()  # grpcio resets the stream: RST_STREAM CANCEL
        wait_for(marks / f"{name}.cancelled", server)
    assert not (marks / f"{name}.not_cancelled").exists()
    assert cancelled_count(server, style) == before + 1
    answers(server, style)
    assert "Traceback" not in server.log()
