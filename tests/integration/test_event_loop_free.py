"""One large request must not freeze every other client (issue 18, part 3).

The real server runs as a subprocess on loopback ports. While a large body is decoded,
served and encoded, another thread polls /v2/health/live on its own keep-alive connection:
every answer must come within ``LIVE_BOUND`` seconds. Before decoding moved off the event
loop and lost its per-element Python loops, the same requests held the loop for seconds
(BYTES elements cut one by one on the loop, in both directions). The bound is a liveness
bound, generous for a loaded two-core machine, not a speed measurement. The client sends
pre-built bytes over raw sockets (and grpcio's C core), so that the poller's thread is not
starved by the client's own Python work.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import grpc
import orjson
import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

#: seconds a health check may take while the large request runs. On the two-core machine of
#: these tests, the unfixed server took 2.8-3.3 s (BYTES) and 2.0 s (JSON); the fixed one
#: 0.2 s, and 0.6-0.8 s beside two busy loops (one orjson parse or ONNX Runtime's string
#: conversion still holds the GIL throughout).
LIVE_BOUND = 1.5
#: elements of the BYTES requests: 32 MB of empty strings (4-byte length prefixes); the
#: finding's 16 MB held the unfixed server only 1.1-1.4 s here, too near a bound that must
#: also hold on a loaded machine
ELEMENTS = 8_000_000
#: the server's max_tensor_elements: above the BYTES requests, below the JSON one
MAX_ELEMENTS = 10_000_000
TIMEOUT = 120.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("loop-repo")
    path = modelgen.identity(repo, "BYTES")
    write_config(path.parent.parent, modelgen.model_config(path))
    # JSON bodies up to 64 MiB are read (above the default cap) so that the decoders' own
    # bounds are what these tests meet
    env = {
        "INFERPLEX_MAX_TENSOR_ELEMENTS": str(MAX_ELEMENTS),
        "INFERPLEX_MAX_JSON_REQUEST_BYTES": str(64 << 20),
    }
    running = start_server(repo, repo / "server.log", env=env)
    yield running
    running.stop()


class HealthPoller:
    """Polls /v2/health/live back to back on one connection; keeps the slowest answer."""

    def __init__(self, server: RunningServer) -> None:
        self._address = (HOST, server.http_port)
        self._stop = threading.Event()
        self.slowest = 0.0
        self.answers = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)

    def _run(self) -> None:
        try:
            with socket.create_connection(self._address, timeout=TIMEOUT) as sock:
                while not self._stop.is_set():
                    start = time.perf_counter()
                    sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: test\r\n\r\n")
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = sock.recv(4096)
                        if not chunk:
                            raise ConnectionError("the server closed the health connection")
                        head += chunk
                    assert head.startswith(b"HTTP/1.1 200"), head
                    self.slowest = max(self.slowest, time.perf_counter() - start)
                    self.answers += 1
                    self._stop.wait(0.005)
        except BaseException as exc:  # reported by check()
            self.error = exc

    def check(self) -> None:
        assert self.error is None, f"health polling failed: {self.error!r}"
        assert self.answers > 0
        assert self.slowest < LIVE_BOUND, (
            f"/v2/health/live took {self.slowest:.2f} s while the large request ran"
        )


def post(
    server: RunningServer, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, bytes]:
    """One HTTP/1.1 POST over a raw socket: the status and the whole response body."""
    lines = [f"POST {path} HTTP/1.1", "Host: test", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((HOST, server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        received = bytearray()
        while b"\r\n\r\n" not in received:
            received += sock.recv(1 << 20)
        head, _, rest = bytes(received).partition(b"\r\n\r\n")
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        parts = [rest]
        missing = int(fields[b"content-length"]) - len(rest)
        while missing > 0:
            chunk = sock.recv(1 << 22)
            assert chunk, "the server closed the connection before the whole response"
            parts.append(chunk)
            missing -= len(chunk)
    return int(head.split(b" ")[1]), b"".join(parts)


def test_http_bytes_request_of_32_mb_leaves_health_answering(server: RunningServer) -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1, ELEMENTS],
                    "parameters": {"binary_data_size": 4 * ELEMENTS},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    body = header + bytes(4 * ELEMENTS)
    headers = {"Inference-Header-Content-Length": str(len(header))}
    with HealthPoller(server) as poller:
        status, payload = post(server, "/v2/models/identity_bytes/infer", body, headers)
    assert status == 200, payload[:300]
    assert payload.endswith(bytes(4 * ELEMENTS))  # the empty strings came back, in binary
    poller.check()


def test_grpc_bytes_request_of_32_mb_leaves_health_answering(server: RunningServer) -> None:
    message = pb.ModelInferRequest(model_name="identity_bytes")
    message.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, ELEMENTS])
    message.raw_input_contents.append(bytes(4 * ELEMENTS))
    request = message.SerializeToString()
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(server.grpc_url, options=options) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with HealthPoller(server) as poller:
            answer = infer(request, timeout=TIMEOUT)
    response = pb.ModelInferResponse.FromString(answer)
    assert list(response.outputs[0].shape) == [1, ELEMENTS]
    assert response.raw_output_contents[0] == bytes(4 * ELEMENTS)
    poller.check()


def test_json_body_of_50_mb_is_refused_without_freezing_the_server(
    server: RunningServer,
) -> None:
    width = 8
    rows = 1_411_764  # '["","","","","","","",""],' per row: 48 MB of JSON, 11.3 M strings
    tensor = {
        "name": "INPUT0",
        "datatype": "BYTES",
        "shape": [rows, width],
        "data": [[""] * width] * rows,
    }
    body = orjson.dumps({"inputs": [tensor]})
    with HealthPoller(server) as poller:
        status, payload = post(
            server, "/v2/models/identity_bytes/infer", body, {"Content-Type": "application/json"}
        )
    # refused from the declared shape, before the strings are turned into anything
    assert status == 413, payload[:300]
    error = orjson.loads(payload)["error"]
    assert f"{width * rows} elements, above the limit of {MAX_ELEMENTS}" in error
    poller.check()


def test_deeply_nested_json_is_a_400_without_a_traceback(server: RunningServer) -> None:
    depth = 5000
    data = b"[" * depth + b"NaN" + b"]" * depth
    body = b'{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1,1],"data":' + data + b"}]}"
    deep_parameters = (
        orjson.dumps(
            {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1], "data": ["a"]}]}
        )[:-1]
        + b',"parameters":{"p":'
        + b'{"a":' * 900
        + b"1"
        + b"}" * 900
        + b"}}"
    )
    for request in (body, deep_parameters):
        status, payload = post(server, "/v2/models/identity_bytes/infer", request, {})
        assert status == 400, payload[:300]
        assert "nested" in orjson.loads(payload)["error"]
    assert "Traceback" not in server.log()


def test_json_response_of_8m_strings_leaves_health_answering(server: RunningServer) -> None:
    """The response is written as JSON in pieces (protocol/v2/rest_json.py's JsonPieces):
    no call that holds the GIL copies all of it, so the loop answers meanwhile."""
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1, ELEMENTS],
                    "parameters": {"binary_data_size": 4 * ELEMENTS},
                }
            ],
        }
    )
    body = header + bytes(4 * ELEMENTS)
    headers = {"Inference-Header-Content-Length": str(len(header))}
    with HealthPoller(server) as poller:
        status, payload = post(server, "/v2/models/identity_bytes/infer", body, headers)
    assert status == 200, payload[:300]
    assert payload.endswith(b'""' + b',""' * (ELEMENTS - 1) + b"]}]}")
    poller.check()
