"""Compressed request bodies and messages at the edge (issue 30, the critical finding).

A 255 KB gzip message inflates to 250 MiB: it was inflated on the event loop up to the
server's message limit, whatever it was sent to, with or without a token. Now a body or
message inflates only within the cap of what it was sent to (``--max-small-request-bytes``
for health and the other calls that take none or a tiny one), after the token is checked,
charged to the server's byte budget, off the event loop where the cap is large. Run against
both server pairs (built-in, and uvicorn + grpc.aio, whose grpc-core hands messages over as
they came: transport/grpcio_messages.py).
"""

from __future__ import annotations

import contextlib
import gzip
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server
from tests.conftest import TWINS
from tests.integration.test_event_loop_free import HealthPoller
from tests.support.h2client import INFER, LIVE, H2Client, grpc_frame

TOKEN = "inference-token"
HTTP_TOKEN = {"Authorization": f"Bearer {TOKEN}"}
GRPC_TOKEN = {"authorization": f"Bearer {TOKEN}"}
#: the message and body limit of these servers (what grpc-core would inflate a message to)
MAX_MESSAGE = 64 << 20
SMALL = "INFERPLEX_MAX_SMALL_REQUEST_BYTES"
#: 200 KB of gzip that inflates to 200 MiB, and 1 KB that inflates to 1 MiB: the first is
#: above the small cap (16 KiB) before it is inflated, the second only once it is
BOMB = gzip.compress(bytes(200 << 20))
SMALL_BOMB = gzip.compress(bytes(1 << 20))
CHECK = "/grpc.health.v1.Health/Check"
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED.value[0]


@pytest.fixture(scope="module", params=list(TWINS))
def server(
    request: pytest.FixtureRequest, test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in TWINS[request.param].items()}
    env = {
        "INFERPLEX_INFERENCE_TOKEN": TOKEN,
        "INFERPLEX_MAX_GRPC_MESSAGE_BYTES": str(MAX_MESSAGE),
        "INFERPLEX_MAX_REQUEST_BYTES": str(MAX_MESSAGE),
        **settings,
    }
    log = tmp_path_factory.mktemp("compressed") / "server.log"
    running = start_server(test_repository, log, env=env)
    running.twin = request.param  # type: ignore[attr-defined]
    yield running
    running.stop()


def peak_rss_mb(server: RunningServer) -> float:
    """The server's peak resident memory so far (VmHWM), in MiB."""
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM"))
    return int(line.split()[1]) / 1024


def compressed_call(client: H2Client, path: str, message: bytes, **headers: bytes) -> int:
    extra = [(b"grpc-encoding", b"gzip"), *((k.encode(), v) for k, v in headers.items())]
    stream_id = client.open_stream(path, extra=extra)
    client.send_body(stream_id, grpc_frame(message, compressed=True))
    return stream_id


@pytest.mark.parametrize("path", [LIVE, CHECK])
def test_a_grpc_bomb_to_a_health_call_is_refused_without_being_inflated(
    server: RunningServer, path: str
) -> None:
    before = peak_rss_mb(server)
    with H2Client(server.grpc_port) as client:
        for bomb in (BOMB, BOMB, SMALL_BOMB):
            call = client.wait_finished(compressed_call(client, path, bomb))
            assert call.grpc_status == RESOURCE_EXHAUSTED, call.grpc_message
            assert SMALL in call.grpc_message
        client.live()  # the connection goes on
    # nothing past 16 KiB inflated (grpc-core, left to inflate, went up to its receive
    # limit: 64 MiB, about three times that in RSS)
    grown = peak_rss_mb(server) - before
    assert grown < 32, f"peak RSS grew {grown:.0f} MiB for three bombs"
    if server.twin == "builtin":  # type: ignore[attr-defined]  # grpc.aio's are grpc-core's
        metrics = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
        line = next(x for x in metrics.splitlines() if 'limit="message_size"' in x)
        assert float(line.split()[-1]) >= 3


def test_an_http_body_to_an_endpoint_that_takes_none_is_refused(server: RunningServer) -> None:
    base = f"http://{HOST}:{server.http_port}"
    before = peak_rss_mb(server)
    for body in (BOMB, SMALL_BOMB):
        response = requests.get(
            f"{base}/v2/health/live", data=body, headers={"Content-Encoding": "gzip"}, timeout=30
        )
        assert response.status_code == 413, response.text
        assert "takes no request body" in response.json()["error"]
    # a tiny POST endpoint: its limit before inflation, and as it inflates
    for body in (BOMB, SMALL_BOMB):
        response = requests.post(
            f"{base}/v2/repository/index",
            data=body,
            headers={"Content-Encoding": "gzip", **HTTP_TOKEN},
            timeout=30,
        )
        assert response.status_code == 413, response.text
        assert SMALL in response.json()["error"]
    assert peak_rss_mb(server) - before < 32
    assert requests.get(f"{base}/v2/health/live", timeout=10).status_code == 200


def test_a_chunked_body_to_a_tiny_endpoint_is_bounded_as_it_arrives(
    server: RunningServer,
) -> None:
    with socket.create_connection((HOST, server.http_port), timeout=30) as sock:
        head = (
            "POST /v2/repository/index HTTP/1.1\r\nHost: test\r\n"
            f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        sock.sendall(head.encode())
        chunk = b"%x\r\n%s\r\n" % (32 << 10, b" " * (32 << 10))
        try:
            for _ in range(64):  # 2 MiB, unless the server stops reading first
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(4096):  # answered with Connection: close
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert SMALL.encode() in answer


def test_a_compressed_body_without_a_token_is_refused_before_inflation(
    server: RunningServer,
) -> None:
    before = peak_rss_mb(server)
    response = requests.post(
        f"http://{HOST}:{server.http_port}/v2/models/add_sub/infer",
        data=BOMB,
        headers={"Content-Encoding": "gzip"},
        timeout=30,
    )
    assert response.status_code == 401, response.text
    with H2Client(server.grpc_port) as client:
        call = client.wait_finished(compressed_call(client, INFER, BOMB))
        assert call.grpc_status == UNAUTHENTICATED, call.grpc_message
    assert peak_rss_mb(server) - before < 32


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_inference_within_the_limits_works(
    server: RunningServer, algorithm: str
) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    with grpcclient.InferenceServerClient(f"{HOST}:{server.grpc_port}") as client:
        inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer(
            "add_sub", inputs, headers=GRPC_TOKEN, compression_algorithm=algorithm
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        # 32 KB of zeros: compressed for sure (grpc-core sends a message that does not
        # shrink as it is)
        zeros = np.zeros((1, 8192), np.float32)
        big = grpcclient.InferInput("INPUT0", [1, 8192], "FP32")
        big.set_data_from_numpy(zeros)
        result = client.infer(
            "identity_fp32", [big], headers=GRPC_TOKEN, compression_algorithm=algorithm
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), zeros)
    client_http = httpclient.InferenceServerClient(f"{HOST}:{server.http_port}")
    try:
        inputs_http = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs_http[0].set_data_from_numpy(a)
        inputs_http[1].set_data_from_numpy(b)
        result_http = client_http.infer(
            "add_sub",
            inputs_http,
            headers=dict(HTTP_TOKEN),  # tritonclient adds its own to the dict
            request_compression_algorithm=algorithm,
        )
        np.testing.assert_array_equal(result_http.as_numpy("OUTPUT1"), a - b)
    finally:
        client_http.close()


@pytest.fixture(scope="module")
def builtin_server(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The built-in servers with their default message limit (256 MiB)."""
    log = tmp_path_factory.mktemp("compressed-large") / "server.log"
    running = start_server(test_repository, log, env={"INFERPLEX_INFERENCE_TOKEN": TOKEN})
    yield running
    running.stop()


def test_health_answers_while_large_compressed_messages_inflate(
    builtin_server: RunningServer,
) -> None:
    """Messages within the limit that take long to inflate (256 MiB each, about 0.5 s here;
    four at once, twice) are inflated off the event loop: health checks go on being answered
    (the unfixed server inflated them one after another on the loop: 2 s and more). The
    built-in server only: grpc.aio inflates inside grpc-core, off the loop."""
    # zeros: what a slow inflation makes; then not a ModelInferRequest (field 0), which the
    # codec finds at the first byte
    compressed = gzip.compress(bytes(256 << 20), 1)
    token = GRPC_TOKEN["authorization"].encode()
    with HealthPoller(builtin_server) as poller, H2Client(builtin_server.grpc_port) as client:
        for _ in range(2):
            ids = [
                compressed_call(client, INFER, compressed, authorization=token) for _ in range(4)
            ]
            for stream_id in ids:
                call = client.wait_finished(stream_id)
                # inflated whole (or refused by the budget, UNAVAILABLE), never too large;
                # then refused as malformed, or for what decoding it would allocate
                assert call.grpc_status not in (None, 0), call.grpc_message
                if call.grpc_status == RESOURCE_EXHAUSTED:
                    assert "once decoded" in call.grpc_message, call.grpc_message
    poller.check()


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate,chunked"])
def test_a_transfer_coding_besides_chunked_is_not_implemented(
    server: RunningServer, coding: str
) -> None:
    """RFC 9112 6.1: a transfer coding the server does not understand gets 501 (the body was
    passed on still coded). llhttp itself refuses a coding after chunked, or chunked twice
    (400)."""
    with socket.create_connection((HOST, server.http_port), timeout=30) as sock:
        head = (
            "POST /v2/repository/index HTTP/1.1\r\nHost: test\r\n"
            f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: {coding}\r\n\r\n"
        )
        sock.sendall(head.encode() + b"2\r\n{}\r\n0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # answered with Connection: close
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 501"), answer[:200]
    assert b"is not implemented" in answer
