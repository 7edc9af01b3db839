"""Regression tests of the gRPC port for the HTTP/2 attacks with CVEs in other servers: each
attack gets the protocol's answer, the server's buffering stays bounded, and *another*
client's health call answers while the attack runs (within 2 s: a liveness bound, not a
speed measurement; before these limits several attacks froze the event loop for seconds).

Most run the built-in server in-process (tests/support/h2raw.py); the ones that need the
batcher, models or the server's RSS run ``inferplex serve`` as a process.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import requests
from h2.errors import ErrorCodes

from inferplex.protocol.v2 import generated as pb
from inferplex.transport.http2_limits import Http2Limits
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support import h2client
from tests.support.h2raw import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HOST,
    INITIAL_WINDOW_SIZE,
    LIVE,
    NO_ERROR,
    PING,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    SLOW,
    TIMEOUT,
    WINDOW_UPDATE,
    Conn,
    Served,
    frame,
    serving,
    settings,
    u32,
)

#: how long another client's health call may take while an attack runs
LIVENESS_S = 2.0


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving() as server:
        yield server


def _live_within(port: int, seconds: float = LIVENESS_S) -> None:
    """A ServerLive-like call on a fresh connection answers within ``seconds``."""
    began = time.monotonic()
    with Conn(port) as other:
        other.handshake()
        other.send(other.call(1, LIVE))
        assert other.grpc_status(1) == 0
    took = time.monotonic() - began
    assert took < seconds, f"another client's health call took {took:.1f} s during the attack"


def _in_background(send: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


# -- floods of frames that cost the server and the attacker nothing ------------------------------


def _flood(conn: Conn, kind: str) -> bytes:
    """The attack's bytes: many frames of one kind."""
    n = 20_000
    if kind == "continuation":  # CVE-2024-27316, CVE-2023-45288: never-ending header block
        return conn.headers(1, flags=0) + frame(CONTINUATION, 0, 1) * n
    if kind == "ping":  # CVE-2019-9512
        return frame(PING, 0, 0, bytes(8)) * n
    if kind == "settings":  # CVE-2019-9515
        return settings((INITIAL_WINDOW_SIZE, 65_535)) * n
    if kind == "settings_entries":  # CVE-2020-11080: one SETTINGS frame, many entries
        return settings(*[(INITIAL_WINDOW_SIZE, 65_535)] * 20_000)
    if kind == "empty_data":  # CVE-2019-9518
        return conn.headers(1, conn.fields(SLOW)) + frame(DATA, 0, 1) * n
    if kind == "window_update":
        return frame(WINDOW_UPDATE, 0, 0, u32(1)) * n
    if kind == "priority":  # CVE-2019-9513
        return b"".join(frame(PRIORITY, 0, 1 + 2 * (i % 1000), u32(0) + b"\x10") for i in range(n))
    if kind == "reset":  # CVE-2023-44487: start a call, reset it, again
        return b"".join(
            conn.call(sid, SLOW) + frame(RST_STREAM, 0, sid, u32(8)) for sid in range(1, 2 * n, 2)
        )
    if kind == "malformed":  # CVE-2019-9514: requests the server must reset
        return b"".join(
            conn.headers(sid, [*conn.fields(), ("Upper", "1")], END_HEADERS | END_STREAM)
            for sid in range(1, 2 * n, 2)
        )
    raise AssertionError(kind)


#: which limit each flood runs into
_LIMIT = {
    "continuation": "header_frames",
    "ping": "control_frames",
    "settings": "control_frames",
    "settings_entries": "settings_entries",
    "empty_data": "control_frames",
    "window_update": "control_frames",
    "priority": "control_frames",
    "reset": "resets",
    "malformed": "resets",
}


@pytest.mark.parametrize("kind", list(_LIMIT))
def test_a_flood_gets_goaway_enhance_your_calm(served: Served, kind: str) -> None:
    counters = served.server.counters
    before = counters.exceeded[_LIMIT[kind]]
    with Conn(served.port) as conn:
        conn.handshake()
        attack = _flood(conn, kind)
        sender = _in_background(lambda: conn.send(attack))
        _live_within(served.port)
        goaway = conn.expect(lambda f: f.kind == GOAWAY, "GOAWAY")
        assert goaway.code == ENHANCE_YOUR_CALM
        answers = [f for f in conn.received if f.kind in (PING, SETTINGS, RST_STREAM)]
        assert len(answers) <= 2_100  # the budget, not one answer per frame sent
        while conn.read() is not None:  # then the server's FIN
            pass
        sender.join(TIMEOUT)
    assert counters.exceeded[_LIMIT[kind]] == before + 1
    _eventually(lambda: served.run(lambda: served.slow_started == served.slow_cancelled))


#: how long a wait for the server may take before it counts as never: long, since each wait
#: ends as soon as its condition holds, and a busy machine may run the slow model 10x slower
PATIENCE = 60.0
RESOURCE_EXHAUSTED = 8  # the gRPC status


def _eventually(done: Callable[[], bool], what: str = "the server to catch up") -> None:
    deadline = time.monotonic() + PATIENCE
    while not done():
        assert time.monotonic() < deadline, f"waited {PATIENCE} s for {what}"
        time.sleep(0.01)


def test_reset_calls_are_cancelled_and_free_their_stream_slots() -> None:
    """Rapid reset: every call the client resets is cancelled at once, and its slot is free:
    a client resetting as many calls as the stream limit may open keeps being served."""
    with serving(Http2Limits(max_concurrent_streams=4)) as server, Conn(server.port) as conn:
        conn.handshake()
        for sid in range(1, 80, 2):  # 40 calls, never more than 4 open
            conn.send(conn.call(sid, SLOW), frame(RST_STREAM, 0, sid, u32(8)))
        conn.send(conn.call(81))
        assert conn.grpc_status(81) == 0
        assert not [f for f in conn.received if f.kind == RST_STREAM]  # nothing refused
        # every call started is cancelled (one reset before it ran never starts)
        _eventually(lambda: server.run(lambda: server.slow_started == server.slow_cancelled))


# -- time limits --------------------------------------------------------------------------------


def test_connections_that_never_send_the_preface_are_closed() -> None:
    """500 TCP connections that never sent the preface stayed open forever."""
    with serving(Http2Limits(preface_timeout_s=0.5)) as server:
        socks = [socket.create_connection((HOST, server.port), timeout=TIMEOUT) for _ in range(100)]
        try:
            for sock in socks:
                data = b""
                while chunk := sock.recv(1 << 16):  # the server's SETTINGS, GOAWAY, then EOF
                    data += chunk
                assert GOAWAY in {data[i + 3] for i in _frame_offsets(data)}
                sock.close()
            _eventually(lambda: not server.server.counters.connections, "the connections to close")
            assert server.server.counters.exceeded["preface_timeout"] == 100
        finally:
            for sock in socks:
                sock.close()


def _frame_offsets(data: bytes) -> Iterator[int]:
    offset = 0
    while offset + 9 <= len(data):
        yield offset
        offset += 9 + int.from_bytes(data[offset : offset + 3], "big")


def test_an_idle_connection_is_closed_with_goaway() -> None:
    with serving(Http2Limits(idle_timeout_s=0.3)) as server, Conn(server.port) as conn:
        conn.handshake()
        conn.send(conn.call(1))
        assert conn.grpc_status(1) == 0
        conn.connection_error(NO_ERROR)
        assert server.server.counters.exceeded["idle_timeout"] == 1


def test_keepalive_closes_a_peer_that_does_not_answer() -> None:
    limits = Http2Limits(keepalive_s=0.2, keepalive_timeout_s=0.2)
    with serving(limits) as server, Conn(server.port) as conn:
        conn.handshake()
        ping = conn.expect(lambda f: f.kind == PING, "a keepalive PING")
        assert not ping.flags  # not answered
        conn.connection_error(NO_ERROR)
        assert server.server.counters.exceeded["keepalive_timeout"] == 1


def test_keepalive_keeps_a_peer_that_answers() -> None:
    limits = Http2Limits(keepalive_s=0.1, keepalive_timeout_s=0.2)
    with serving(limits) as server, Conn(server.port) as conn:
        conn.handshake()
        for _ in range(4):
            ping = conn.expect(lambda f: f.kind == PING, "a keepalive PING")
            conn.send(frame(PING, 1, 0, ping.payload))
        conn.alive()
        assert server.server.counters.exceeded["keepalive_timeout"] == 0


def test_maximum_connection_age_then_grace() -> None:
    limits = Http2Limits(max_connection_age_s=0.2, max_connection_age_grace_s=0.3)
    with serving(limits) as server, Conn(server.port) as conn:
        conn.handshake()
        conn.send(conn.call(1, SLOW))
        first = conn.expect(lambda f: f.kind == GOAWAY, "the first GOAWAY")
        assert first.code == NO_ERROR
        while conn.read() is not None:  # the grace passes: the call is cancelled, then close
            pass
        assert not conn.reset_by_peer
        assert server.run(lambda: server.slow_cancelled) == 1
        assert server.server.counters.exceeded["max_connection_age"] == 1


# -- flow control and closing -------------------------------------------------------------------


def test_data_past_the_stream_window_is_a_flow_control_error(served: Served) -> None:
    with Conn(served.port) as conn:
        conn.handshake()
        conn.send(conn.headers(1, conn.fields(SLOW)))
        # a message of 0 bytes announced, then the rest of the stream's window (1 MiB) and more
        conn.send(frame(DATA, 0, 1, bytes((1 << 20) - 5)), frame(DATA, 0, 1, bytes(10)))
        assert conn.stream_error(1, FLOW_CONTROL_ERROR) == RST_STREAM


def test_the_connection_window_opens_for_streams_that_wait_for_room() -> None:
    """Bytes of messages kept while they wait for room were given back to the connection
    window only once whole: streams that had to wait ate the window of those that could go
    on (issue 30: two 32 MiB calls hung). 300 streams x 60,000 bytes, 18 MB past the 16 MiB
    window, each within its stream's window: the connection window keeps opening."""
    with serving() as server, Conn(server.port) as conn:
        conn.handshake()
        prefix = b"\0" + (1 << 20).to_bytes(4, "big")
        for sid in range(1, 600, 2):
            conn.send(
                conn.headers(sid, conn.fields(SLOW)), frame(DATA, 0, sid, prefix + bytes(60_000))
            )
        conn.alive()
        opened = sum(
            int.from_bytes(f.payload, "big")
            for f in conn.received
            if f.kind == WINDOW_UPDATE and f.stream_id == 0
        )
        assert opened >= 16 << 20  # the preface's and what the streams sent
        assert not [f for f in conn.received if f.kind == GOAWAY]


def test_an_oversized_frame_gets_goaway_then_fin_not_a_reset(served: Served) -> None:
    """The GOAWAY of a connection error must reach a peer still sending: closing with its
    bytes unread made the kernel reset the connection, which destroys what the peer had not
    read yet, the GOAWAY included."""
    with Conn(served.port) as conn:
        conn.handshake()
        oversized = ((1 << 24) - 1).to_bytes(3, "big") + bytes([DATA, 0]) + u32(1)

        failed: list[OSError] = []

        def send() -> None:
            try:
                conn.sock.sendall(oversized + bytes(2 << 20))
            except OSError as exc:  # a reset is reported to one call: this one, or a read
                failed.append(exc)

        sender = _in_background(send)
        sender.join(TIMEOUT)  # all sent before anything is read: the server reads or resets
        assert not failed, f"the server reset the connection: {failed[0]!r}"
        conn.connection_error(FRAME_SIZE_ERROR)


# -- with the models: the batcher, RSS ----------------------------------------------------------


@pytest.fixture(scope="module")
def server(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("attacks") / "server.log"
    env = {
        "INFERPLEX_HTTP2_CONNECTION_BUFFER_BYTES": str(16 << 20),
        "INFERPLEX_HTTP2_SEND_TIMEOUT_S": "1",
    }
    running = start_server(test_repository, log_path, env=env)
    yield running
    assert running.stop() == 0, running.log()


def _metric(server: RunningServer, name: str, **labels: str) -> float:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=PATIENCE).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(part in (match.group(1) or "") for part in want.split(",") if part):
            return float(match.group(2))
    raise AssertionError(f"no {name}{{{want}}} in /metrics")


def _slow_request() -> bytes:
    return pb.ModelInferRequest(
        model_name="slow",
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1]}],
        raw_input_contents=[np.zeros(1, "<f4").tobytes()],
    ).SerializeToString()


def test_rapid_reset_takes_the_calls_out_of_the_queue(server: RunningServer) -> None:
    """CVE-2023-44487: calls to a slow model (about 1 s a batch of up to 8), reset once
    queued, still ran, one batch after another, ahead of everyone else's; now they leave the
    queue and only the batch already running is spent on them."""
    executions = _metric(server, "nv_inference_exec_count", model="slow")
    instances = _metric(server, "inferplex_model_instances", model="slow")
    calls = range(1, 81, 2)  # 40 calls: 5 batches
    with Conn(server.grpc_port) as attacker:
        attacker.handshake()
        for sid in calls:
            attacker.send(attacker.call(sid, h2client.INFER, _slow_request()))
        _eventually(
            lambda: _metric(server, "nv_inference_pending_request_count", model="slow") >= 16,
            "the calls to be queued",
        )
        for sid in calls:
            attacker.send(frame(RST_STREAM, 0, sid, u32(8)))
        attacker.alive()
        with h2client.H2Client(server.grpc_port) as other:
            other.live()
            other.infer(_slow_request()).assert_ok()  # after the running batch at most
    assert _metric(server, "nv_inference_pending_request_count", model="slow") == 0
    # the batches running when the resets came (one per instance at most), and the fresh one
    assert _metric(server, "nv_inference_exec_count", model="slow") - executions <= instances + 1


def _rss(server: RunningServer) -> int:
    return int(psutil.Process(server.process.pid).memory_info().rss)


def test_partial_bodies_are_bounded(server: RunningServer) -> None:
    """200 streams x 4 MB of partial bodies took RSS from 350 MB to 938 MB: request bytes a
    connection reserves are bounded (16 MiB here); the streams past it wait for room, each
    held back by its own window (its initial one: 64 KiB), and the connection goes on."""
    before = _rss(server)
    with h2client.H2Client(server.grpc_port) as client:
        client.live()
        message = b"\0" + (4 << 20).to_bytes(4, "big") + bytes(3 << 20)
        streams = []
        for _ in range(40):  # 120 MB sent, were it all taken
            sid = client.open_stream(h2client.INFER)
            streams.append(sid)
            room = client.conn.local_flow_control_window(sid)  # sent without waiting
            client.send_body(sid, message[:room], end_stream=False)
        client.poll()
        grown = _rss(server) - before
        assert not [s for s in streams if client.calls[s].finished], "a stream was refused"
        assert grown < 64 << 20, f"RSS grew by {grown >> 20} MiB"
        assert _metric(server, "inferplex_http2_buffered_bytes") <= (16 << 20) + 40 * (64 << 10)
        with h2client.H2Client(server.grpc_port) as other:
            other.live()
    assert _metric(server, "inferplex_http2_limit_exceeded", limit="connection_buffer_waits") >= 1


def test_responses_stalled_on_a_closed_window_are_dropped(server: RunningServer) -> None:
    """200 x 1 MB responses to a client that never opened its window were held forever."""
    values = np.ones(250_000, np.float32)  # 1 MB each way
    with h2client.H2Client(server.grpc_port, initial_window=0, acknowledge=False) as client:
        client.wait_until(lambda: client.settings_acks == 2, "SETTINGS ACKs")
        streams = [
            client.start_call(h2client.INFER, h2client.echo_request(values)) for _ in range(20)
        ]
        # the send timeout (1 s here) resets each answer held, its memory freed; once the
        # answers held pass the connection's buffer (16 MiB here), later calls are refused
        cancelled = refused = 0
        for sid in streams:
            call = client.wait_finished(sid)
            if call.reset == ErrorCodes.CANCEL:
                cancelled += 1
            else:
                assert call.grpc_status == RESOURCE_EXHAUSTED, call
                refused += 1
        assert cancelled >= 1 and cancelled + refused == len(streams)
        with h2client.H2Client(server.grpc_port) as other:
            other.live()
    assert _metric(server, "inferplex_http2_limit_exceeded", limit="send_timeout") >= cancelled


def test_closed_http_connections_take_their_requests_out_of_the_queue(
    server: RunningServer,
) -> None:
    """The HTTP/1.1 twin of the rapid reset: clients that send a request to the slow model
    and close their connection leave nothing in its queue to be computed for nobody."""
    executions = _metric(server, "nv_inference_exec_count", model="slow")
    instances = _metric(server, "inferplex_model_instances", model="slow")
    body = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,1],"data":[0]}]}'
    request = (
        b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    clients = [socket.create_connection((h2client.HOST, server.http_port)) for _ in range(40)]
    try:
        for client in clients:
            client.sendall(request)
        _eventually(
            lambda: _metric(server, "nv_inference_pending_request_count", model="slow") >= 16,
            "the requests to be queued",
        )
    finally:
        for client in clients:
            client.close()
    _eventually(
        lambda: _metric(server, "nv_inference_pending_request_count", model="slow") == 0,
        "the queue to empty",
    )
    answer = requests.post(
        f"http://{h2client.HOST}:{server.http_port}/v2/models/slow/infer",
        data=body,
        timeout=PATIENCE,  # behind the batches still running: seconds on a busy machine
    )
    assert answer.status_code == 200, answer.text
    # the batches running when the clients left (one per instance at most), and the fresh one
    assert _metric(server, "nv_inference_exec_count", model="slow") - executions <= instances + 1
