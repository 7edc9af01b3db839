"""Triton's generate extension over HTTP against a real server, on the built-in HTTP server
and its uvicorn twin, with a plain HTTP client: ``/generate_stream`` as server-sent events
(one per token of a model whose handler yields), ``/generate`` as one JSON object, an
ordinary ONNX model through both, errors before the first response as JSON with their
status, a client that goes away (the model stops) and one that does not read (the model is
held back). No timing is asserted."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from examples import modelgen
from examples.modelgen import decoupled
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.polling import wait_for

#: TorchServe style, decoupled: yields ``count`` text outputs of ``size`` characters, writing
#: how many it yielded to its progress file, and "stopped" when it is closed early (each
#: written whole, by a rename, so that the test never reads a file half written)
ENDLESS = """
import os

import numpy as np
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def initialize(self, context):
        super().initialize(context)
        self.progress = context.config["parameters"]["progress"]["string_value"]

    def report(self, text):
        with open(self.progress + ".new", "w") as file:
            file.write(text)
        os.replace(self.progress + ".new", self.progress)

    def inference(self, data):
        count, size = (int(v) for v in data["IN"].reshape(-1))
        done = 0
        try:
            for done in range(1, count + 1):
                yield {"text_output": np.array([b"x" * size], dtype=object)}
                self.report(str(done))
        finally:
            if done < count:
                self.report("stopped")
"""

ENDLESS_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters [ {{ key: "progress" value {{ string_value: "{progress}" }} }} ]
"""

#: decoupled, Triton style: sends N responses (the parameter "count", 0 by default), then the
#: final flag with an error response
FAILS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            for _ in range(json.loads(request.parameters()).get("count", 0)):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)]))
            error = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
            sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

FAILS_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
"""


@pytest.fixture(scope="module", params=["builtin", "uvicorn"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, Path]]:
    root = tmp_path_factory.mktemp(f"generate_{request.param}")
    decoupled.tokens(root)
    path = modelgen.add_sub(root)
    write_config(root / "add_sub", modelgen.model_config(path, max_batch_size=8))
    progress = root / "endless.progress"
    decoupled.write_model(root, "endless", ENDLESS, ENDLESS_CONFIG.format(progress=progress))
    decoupled.write_model(root, "fails", FAILS, FAILS_CONFIG)
    server = start_server(root, root.parent / "server.log", args=["--http-server", request.param])
    yield server, progress
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log()}"


def url(server: RunningServer, model: str, action: str) -> str:
    return f"http://{server.http_url}/v2/models/{model}/{action}"


def events(response: requests.Response) -> list[dict[str, Any]]:
    """The ``data:`` events of a server-sent event stream."""
    found = []
    for line in response.iter_lines():
        if line.startswith(b"data: "):
            found.append(json.loads(line[len(b"data: ") :]))
    return found


def test_generate_stream_sends_one_event_per_token(served: tuple[RunningServer, Path]) -> None:
    server, _ = served
    body = {"id": "42", "text_input": "tokens come one by one"}
    with requests.post(url(server, "tokens", "generate_stream"), json=body, stream=True) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        found = events(reply)
    assert [e["text_output"] for e in found] == ["tokens", "come", "one", "by", "one"]
    assert {(e["id"], e["model_name"], e["model_version"]) for e in found} == {
        ("42", "tokens", "1")
    }


def test_generate_answers_one_object(served: tuple[RunningServer, Path]) -> None:
    server, _ = served
    reply = requests.post(url(server, "tokens", "generate"), json={"text_input": "single"})
    assert reply.status_code == 200
    assert reply.json() == {"model_name": "tokens", "model_version": "1", "text_output": "single"}
    several = requests.post(url(server, "tokens", "generate"), json={"text_input": "a b"})
    assert several.status_code == 501
    error = several.json()["error"]
    assert "generate expects model to produce exactly 1 response" in error
    assert "model 'tokens' sent more than one response" in error


def test_an_ordinary_model_through_both_endpoints(served: tuple[RunningServer, Path]) -> None:
    server, _ = served
    body = {"INPUT0": [1.0] * 16, "INPUT1": [2.0] * 16, "parameters": {"note": "kept"}}
    reply = requests.post(url(server, "add_sub", "generate"), json=body)
    assert reply.status_code == 200
    assert reply.json()["OUTPUT0"] == [3.0] * 16 and reply.json()["OUTPUT1"] == [-1.0] * 16
    with requests.post(url(server, "add_sub", "generate_stream"), json=body, stream=True) as r:
        found = events(r)
    assert len(found) == 1 and found[0]["OUTPUT0"] == [3.0] * 16


def test_errors_before_the_first_response_are_json_with_their_status(
    served: tuple[RunningServer, Path],
) -> None:
    server, _ = served
    missing = requests.post(url(server, "nope", "generate_stream"), json={"text_input": "x"})
    assert missing.status_code == 404
    assert "unknown model: 'nope'" in missing.json()["error"]
    short = requests.post(url(server, "add_sub", "generate_stream"), json={"INPUT0": [1.0] * 16})
    assert short.status_code == 400 and "INPUT1" in short.json()["error"]
    bad = requests.post(url(server, "tokens", "generate"), data=b"{not json")
    assert bad.status_code == 400


def test_a_model_failing_before_any_response_answers_a_stream_with_its_status(
    served: tuple[RunningServer, Path],
) -> None:
    """As Triton: the status is the first response's, the error an event in its own words;
    after a response, 200 and the error as an event."""
    server, _ = served
    body: dict[str, Any] = {"text_input": "hi"}
    failed = requests.post(url(server, "fails", "generate_stream"), json=body)
    assert failed.status_code == 500
    assert failed.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert events(failed) == [{"error": "An Error Occurred"}]
    body["count"] = 1
    later = requests.post(url(server, "fails", "generate_stream"), json=body)
    assert later.status_code == 200
    assert [e.get("text_output", e.get("error")) for e in events(later)] == [
        "hi",
        "An Error Occurred",
    ]
    unary = requests.post(url(server, "fails", "generate"), json=body)
    assert unary.status_code == 500 and unary.json() == {"error": "An Error Occurred"}


def test_inputs_are_read_as_triton_reads_them(served: tuple[RunningServer, Path]) -> None:
    """One string or a list fills dims [1, 1]; a repeated input and a missing one are 400s in
    Triton's words, on both endpoints, as JSON."""
    server, _ = served
    for text in ("hi", ["hi"], [["hi"]]):
        reply = requests.post(url(server, "fails", "generate_stream"), json={"text_input": text})
        assert reply.status_code == 500 and events(reply) == [{"error": "An Error Occurred"}]
    refused = [
        (b'{"text_input": "a", "text_input": "b"}', "input 'text_input' already exists"),
        (b'{"other": 1}', "expected 1 inputs but got 0 inputs for model 'fails'"),
        (b'{"text_input": ["a", "b"]}', "convert input 'text_input' to tensor with proper shape"),
    ]
    for body, expected in refused:
        for action in ("generate", "generate_stream"):
            reply = requests.post(url(server, "fails", action), data=body)
            assert reply.status_code == 400
            assert reply.headers["content-type"] == "application/json"
            assert expected in reply.json()["error"]


#: generate requests that /infer's checks refuse (issue 30): the model, the body, and what
#: the error must say (the input it names and what was expected)
_DEEP = {"a": 1}
for _ in range(500):
    _DEEP = {"a": _DEEP}
BAD_VALUES = [
    # a wrong-length list: 15 values where the shape needs 16
    ("add_sub", {"INPUT0": [1.0] * 15, "INPUT1": [2.0] * 16}, "INPUT0"),
    # one value where the shape [2] needs two
    ("endless", {"IN": 5}, "The schema can not convert input 'IN' to tensor with proper shape"),
    # booleans where INT32 is declared
    ("endless", {"IN": [True, False]}, "input 'IN': 'data' must hold integers"),
    # a fraction where INT32 is declared: never truncated to 1
    ("endless", {"IN": [1.5, 2]}, "input 'IN': 'data' must hold integers for datatype INT32"),
    # beyond INT32's range
    ("endless", {"IN": [1, 2**40]}, "input 'IN'"),
    # a ragged list
    ("add_sub", {"INPUT0": [[1.0] * 16, [1.0]], "INPUT1": [2.0] * 16}, "input 'INPUT0'"),
    # non-string BYTES values: never str()-ed
    ("tokens", {"text_input": 5}, "input 'text_input': BYTES 'data' must hold strings"),
    ("tokens", {"text_input": ["a", [1]]}, "input 'text_input': BYTES 'data' must hold strings"),
    ("tokens", {"text_input": None}, "input 'text_input': BYTES 'data' must hold strings"),
    # parameters nested 500 deep, named or as a key that names no input
    ("tokens", {"text_input": "x", "parameters": {"p": _DEEP}}, "nested more than 32 levels"),
    ("tokens", {"text_input": "x", "other": _DEEP}, "nested more than 32 levels"),
]


@pytest.mark.parametrize(("model", "body", "expected"), BAD_VALUES)
def test_bad_values_are_a_400_naming_the_input(
    served: tuple[RunningServer, Path], model: str, body: dict[str, Any], expected: str
) -> None:
    server, _ = served
    for action in ("generate", "generate_stream"):
        reply = requests.post(url(server, model, action), json=body, timeout=30)
        assert reply.status_code == 400, reply.text[:300]
        assert expected in reply.json()["error"]


def test_a_client_that_goes_away_stops_the_model(served: tuple[RunningServer, Path]) -> None:
    server, progress = served
    progress.write_text("")
    body = json.dumps({"IN": [10**6, 8]}).encode()
    with raw_request(server, "endless", body) as sock:
        sock.recv(4096)  # the stream has started
    wait_for(lambda: progress.read_text() == "stopped")


def test_a_client_that_does_not_read_holds_the_model_back(
    served: tuple[RunningServer, Path],
) -> None:
    """200 events of 1 MiB to a client that reads none: the model gets no further than the
    socket buffers and the bounded queues hold."""
    server, progress = served
    progress.write_text("")
    count = 200
    body = json.dumps({"IN": [count, 1 << 20]}).encode()
    with raw_request(server, "endless", body) as sock:
        wait_for(lambda: progress.read_text().isdigit())
        for _ in range(30):  # however long it is given, it gets no further
            time.sleep(0.05)
            assert int(progress.read_text()) < count // 2
        received = 0
        while chunk := sock.recv(1 << 20):  # now read it all
            received += len(chunk)
    assert received > count << 20
    assert progress.read_text() == str(count)


class raw_request:
    """A generate_stream request on a socket of our own, whose answer we read as we like."""

    def __init__(self, server: RunningServer, model: str, body: bytes) -> None:
        host, port = server.http_url.rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        head = (
            f"POST /v2/models/{model}/generate_stream HTTP/1.1\r\nhost: test\r\n"
            f"content-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        self._sock.sendall(head + body)

    def __enter__(self) -> socket.socket:
        return self._sock

    def __exit__(self, *_: Any) -> None:
        self._sock.close()
