"""Connections and long-lived streams are budgeted (docs/security.md, "Connections and
streams"): the server-wide and per-peer connection caps, the TLS handshake timeout, the
bounds on gRPC health Watch streams, the clocks before a request and mass cancellation, on
the built-in servers and their reference twins.

Every peer on loopback is 127.0.0.1; a second peer is 127.0.0.2 (Linux routes all of
127.0.0.0/8 to the loopback interface), so the per-peer cap can be told from the global one.
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

from examples import modelgen
from examples.modelgen import add_sub
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.protocol.v2 import generated as pb
from inferplex.server import Server
from tests.conftest import TWINS
from tests.support.certs import Certificates, make_certificates
from tests.support.h2client import H2Client, grpc_frame
from tests.support.polling import wait_for

Status = health_pb2.HealthCheckResponse
#: seconds any wait on the server may take before the test fails (generous: a busy machine)
WAIT_S = 10.0
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"


def serve(repository: Path, **settings: Any) -> Server:
    config = ServerConfig(
        model_repository=repository, http_port=0, grpc_port=0, metrics_port=0, **settings
    )
    return Server(config).start_in_thread()


@pytest.fixture(scope="module", params=list(TWINS))
def twin(request: pytest.FixtureRequest) -> dict[str, str]:
    return TWINS[request.param]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("conn-repo")
    add_sub(repo)
    return repo


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S, source_address=(source, 0))
    return sock


def read_to_close(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a reset counts as a close); the socket is
    closed then."""
    data = b""
    with sock:
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    return data


def answer(sock: socket.socket) -> bytes:
    """One response to ``LIVE`` sent on ``sock``."""
    sock.sendall(LIVE)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "closed without an answer"
        data += chunk
    return data


# -- connection caps ------------------------------------------------------------------------


def test_connections_over_the_caps_are_refused_and_the_others_keep_working(
    repository: Path, twin: dict[str, str]
) -> None:
    server = serve(
        repository,
        max_connections=12,
        max_connections_per_peer=8,
        http_keep_alive_s=60,  # held connections stay while the test runs
        **twin,
    )
    held: list[socket.socket] = []
    try:
        held += [connect(server.http_port) for _ in range(8)]
        refused = read_to_close(connect(server.http_port))  # a 9th from this address
        assert refused.startswith(b"HTTP/1.1 503"), refused
        assert b"INFERPLEX_MAX_CONNECTIONS_PER_PEER" in refused
        # another address has room until the server-wide cap
        held += [connect(server.http_port, "127.0.0.2") for _ in range(4)]
        refused = read_to_close(connect(server.metrics_port, "127.0.0.2"))
        assert refused.startswith(b"HTTP/1.1 503"), refused
        assert b"INFERPLEX_MAX_CONNECTIONS)" in refused  # every listener counts together
        if twin.get("grpc_server") != "grpcio":  # grpc-core keeps its own count
            refused = read_to_close(connect(server.grpc_port, "127.0.0.2"))
            assert b"INFERPLEX_MAX_CONNECTIONS" in refused  # in a GOAWAY
        # the clients already connected are served as before
        for sock in (held[0], held[-1]):
            assert answer(sock).startswith(b"HTTP/1.1 200")
        for sock in held[:4]:
            sock.close()
        held = held[4:]

        def metrics() -> str:
            url = f"http://127.0.0.1:{server.metrics_port}/metrics"
            return str(requests.get(url, timeout=WAIT_S).text)

        wait_for(lambda: 'inferplex_connections_refused{reason="peer"} 1' in metrics())
        assert 'inferplex_connections_refused{reason="server"}' in metrics()
    finally:
        for sock in held:
            sock.close()
        server.stop_thread()


# -- TLS handshake --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def client_hello() -> bytes:
    """The first bytes a TLS client sends."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_a_tls_handshake_that_does_not_finish_is_closed(
    repository: Path, certs: Certificates, twin: dict[str, str]
) -> None:
    server = serve(
        repository,
        tls_cert_file=certs.server_cert,
        tls_key_file=certs.server_key,
        http_header_timeout_s=1,
        http2_preface_timeout_s=1,
        **twin,
    )
    try:
        hello = client_hello()
        for port in (server.http_port, server.grpc_port):
            silent = connect(port)
            partial = connect(port)
            partial.sendall(hello[: len(hello) // 2])
            for sock in (silent, partial):
                start = time.monotonic()
                read_to_close(sock)  # times out (socket.timeout) if it is kept
                assert time.monotonic() - start < 5
        # a client that completes its handshake is served
        url = f"https://127.0.0.1:{server.http_port}/v2/health/live"
        assert requests.get(url, verify=certs.ca, timeout=WAIT_S).status_code == 200
    finally:
        server.stop_thread()


# -- health Watch streams -------------------------------------------------------------------


@pytest.fixture
def watched(repository: Path, twin: dict[str, str]) -> Iterator[Server]:
    server = serve(
        repository,
        model_control_mode="explicit",
        health_watch_max_streams=6,
        health_watch_max_per_connection=4,
        **twin,
    )
    yield server
    server.stop_thread()


def watch(channel: grpc.Channel) -> Any:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Watch(health_pb2.HealthCheckRequest(service="add_sub"), timeout=60)


def refused(call: Any) -> str:
    with pytest.raises(grpc.RpcError) as raised:
        next(call)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    return str(raised.value.details())


def test_watch_streams_are_bounded_and_a_change_reaches_every_watcher(watched: Server) -> None:
    target = f"127.0.0.1:{watched.grpc_port}"
    own = [("grpc.use_local_subchannel_pool", 1)]  # one connection per channel
    with (
        grpc.insecure_channel(target, options=own) as first,
        grpc.insecure_channel(target, options=own) as second,
    ):
        calls = [watch(first) for _ in range(4)]
        assert [next(call).status for call in calls] == [Status.NOT_SERVING] * 4
        assert "INFERPLEX_HEALTH_WATCH_MAX_PER_CONNECTION" in refused(watch(first))
        calls += [watch(second) for _ in range(2)]
        assert [next(call).status for call in calls[4:]] == [Status.NOT_SERVING] * 2
        assert "INFERPLEX_HEALTH_WATCH_MAX_STREAMS" in refused(watch(second))
        url = f"http://127.0.0.1:{watched.http_port}/v2/repository/models/add_sub/load"
        assert requests.post(url, timeout=60).status_code == 200
        assert [next(call).status for call in calls] == [Status.SERVING] * 6
        calls.pop().cancel()  # a place comes free
        replacement = watch(second)
        assert next(replacement).status == Status.SERVING
        for call in [*calls, replacement]:
            call.cancel()


# -- clocks before a request ----------------------------------------------------------------


def test_a_connection_without_a_request_or_with_a_slow_header_block_is_closed(
    repository: Path, twin: dict[str, str]
) -> None:
    """uvicorn keeps a connection that never sends a request, and one whose header block
    never ends, for ever: its twin closes both as the built-in server does."""
    server = serve(repository, http_keep_alive_s=1, http_header_timeout_s=1.5, **twin)
    try:
        silent = connect(server.http_port)
        slow = connect(server.http_port)
        slow.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        start = time.monotonic()
        # a byte every 0.3 s: the header block grows but never ends
        while not select.select([slow], [], [], 0.3)[0] and time.monotonic() - start < 5:
            slow.sendall(b"s")
        read_to_close(slow)  # the built-in server answers 408 first
        assert read_to_close(silent) == b""
        assert time.monotonic() - start < 5
    finally:
        server.stop_thread()


# -- a dropped connection with many requests in flight ---------------------------------------


@pytest.fixture(scope="module")
def slow_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("slow-repo")
    path = modelgen.slow(repo, seconds=0.5)
    write_config(repo / "slow", modelgen.model_config(path, max_batch_size=8))
    return repo


def pending(server: Server) -> float:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    text = requests.get(url, timeout=WAIT_S).text
    found = re.search(r"^nv_inference_pending_request_count\{[^}]*\} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_dropping_a_connection_with_many_stream_requests_keeps_health_prompt(
    slow_repository: Path, twin: dict[str, str]
) -> None:
    """16 ModelStreamInfer streams of 64 requests each wait in a slow model's queue; the
    connection is reset. Their cancellation runs a slice per turn of the loop: a health
    check on another connection stays prompt, and the queue empties (at 8 rows per 0.5 s
    the model alone would take a minute)."""
    server = serve(slow_repository, stream_max_requests=64, **twin)
    streams, per_stream = 16, 64
    message = grpc_frame(
        pb.ModelInferRequest(
            model_name="slow",
            inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1]}],
            raw_input_contents=[np.zeros(1, "<f4").tobytes()],
        ).SerializeToString()
    )
    try:
        client = H2Client(server.grpc_port)
        for _ in range(streams):
            stream_id = client.open_stream("/inference.GRPCInferenceService/ModelStreamInfer")
            client.send_body(stream_id, message * per_stream, end_stream=False)
        wait_for(lambda: pending(server) >= streams * per_stream - 16)
        probe = connect(server.http_port)
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset: every stream of the connection ends at once
        worst = 0.0
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            start = time.monotonic()
            assert answer(probe).startswith(b"HTTP/1.1 200")
            worst = max(worst, time.monotonic() - start)
        probe.close()
        assert worst < 1.0  # generous: a busy machine; unbounded, this was seconds
        wait_for(lambda: pending(server) == 0, timeout=20)
    finally:
        server.stop_thread()
