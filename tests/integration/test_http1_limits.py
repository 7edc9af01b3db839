"""Hostile HTTP/1.1 clients against a real server (issue 18, parts 2, 5 and 6): each attack
gets its refusal as soon as a bound is passed, the server's memory stays bounded, and another
client's ``/v2/health/live`` keeps answering while the attack runs.

The server runs in this process (``Server.start_in_thread``), so its memory is this
process's; clocks are short (1 s). Loopback only, every loop bounded; the latency bound on the
other client is a generous liveness bound, not a speed claim.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from examples.modelgen import add_sub
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server

HOST = "127.0.0.1"
MiB = 1 << 20
#: the other client's health check must answer within this while an attack runs
LIVE_S = 1.0
#: what an attack may add to the server's resident memory
RSS_BOUND = 24 * MiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repository = tmp_path_factory.mktemp("http1-limits")
    add_sub(repository)
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        enable_grpc=False,
        max_request_bytes=6 * MiB,
        max_buffered_bytes=8 * MiB,
        http_connection_buffer_bytes=MiB,
        http_header_timeout_s=1.0,
        http_body_timeout_s=1.0,
        http_body_min_rate=10_000,
        http_keep_alive_s=1.0,
        http_send_timeout_s=1.0,
    )
    with Server(config) as running:
        yield running


class Watch:
    """While an attack runs: another client's health checks (latency) and this process's
    resident memory (the server's)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.baseline = self.peak = psutil.Process().memory_info().rss
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._live), threading.Thread(target=self._rss)]

    def __enter__(self) -> Watch:
        for thread in self._threads:
            thread.start()
        self._answered(1)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._answered(3)  # a refused attack can be over in a few ms: a few answers more
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _answered(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.latencies) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    def _live(self) -> None:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=10)
        while not self._stop.wait(0.02):
            start = time.monotonic()
            try:
                connection.request("GET", "/v2/health/live")
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append(f"status {response.status}")
            except (OSError, http.client.HTTPException) as exc:
                # the keep-alive clock may close it between two checks: one retry
                connection.close()
                connection = http.client.HTTPConnection(HOST, self.port, timeout=10)
                if not isinstance(exc, (http.client.RemoteDisconnected, ConnectionError)):
                    self.failures.append(repr(exc))
                continue
            self.latencies.append(time.monotonic() - start)
        connection.close()

    def _rss(self) -> None:
        process = psutil.Process()
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, process.memory_info().rss)

    def check(self) -> None:
        assert not self.failures, self.failures[:3]
        assert len(self.latencies) >= 3, "the other client got (almost) no answers"
        assert max(self.latencies) < LIVE_S, f"health check took {max(self.latencies):.2f} s"
        grown = self.peak - self.baseline
        assert grown < RSS_BOUND, f"the server's memory grew by {grown / MiB:.1f} MiB"


def read_answer(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One response (by Content-Length) from a blocking socket."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed without an answer: {data[:200]!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]


def flood(port: int, prefix: bytes, piece: bytes, total: int, pause: float = 0.05) -> int:
    """Send ``prefix`` and then ``piece`` until ``total`` bytes, stopping as soon as the
    server answers or closes; the status it answered."""
    with socket.create_connection((HOST, port)) as sock:
        sock.sendall(prefix)
        for _ in range(total // len(piece)):
            readable, _, _ = select.select([sock], [], [], pause)
            if readable:
                break
            try:
                sock.sendall(piece)
            except OSError:
                break
        return read_answer(sock)[0]


def refusals(server: Server, reason: str) -> float:
    with socket.create_connection((HOST, server.metrics_port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        _, _, body = read_answer(sock)
    pattern = rf'^inferplex_http_refusals\{{reason="{reason}"\}} (\S+)$'
    found = re.search(pattern, body.decode(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def gauge(server: Server, name: str) -> float:
    with socket.create_connection((HOST, server.metrics_port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        _, _, body = read_answer(sock)
    found = re.search(rf"^{name} (\S+)$", body.decode(), re.MULTILINE)
    assert found, name
    return float(found.group(1))


# -- the head -------------------------------------------------------------------------------
def test_a_16_mb_url_without_its_end_gets_414_at_the_limit(server: Server) -> None:
    """Was accumulated whole (2.1 s of CPU, +16 MB)."""
    before = refusals(server, "uri_too_long")
    with Watch(server.http_port) as watch:
        status = flood(server.http_port, b"GET /", b"a" * 65536, 16 * MiB)
    assert status == 414
    watch.check()
    assert refusals(server, "uri_too_long") == before + 1


def test_a_32_mb_header_value_gets_431_at_the_limit(server: Server) -> None:
    """Was re-joined by the parser on every read (7.3 s of CPU)."""
    with Watch(server.http_port) as watch:
        status = flood(
            server.http_port,
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Long: ",
            b"v" * 65536,
            32 * MiB,
        )
    assert status == 431
    watch.check()


# -- clocks -----------------------------------------------------------------------------------
def test_a_header_block_sent_a_byte_at_a_time_gets_408(server: Server) -> None:
    """One byte every 3 s kept a connection for ever; here one every 0.25 s, clock 1 s."""
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: "
    with Watch(server.http_port) as watch:
        status = flood(server.http_port, head, b"s", 40, pause=0.25)
    assert status == 408
    watch.check()
    assert refusals(server, "header_timeout") >= 1


def test_a_body_below_the_minimum_rate_gets_408(server: Server) -> None:
    head = (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    with Watch(server.http_port) as watch:
        status = flood(server.http_port, head, b"{" * 10, 4000, pause=0.1)
    assert status == 408
    watch.check()
    assert refusals(server, "body_timeout") >= 1


def test_connections_that_never_send_a_byte_are_closed(server: Server) -> None:
    with Watch(server.http_port) as watch:
        silent = [socket.create_connection((HOST, server.http_port)) for _ in range(200)]
        deadline = time.monotonic() + 15
        for sock in silent:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ConnectionError):
                assert sock.recv(1) == b""
            sock.close()
    watch.check()


def test_a_client_that_never_reads_its_answers_is_dropped(server: Server) -> None:
    """Pipelined requests whose answers are never read: the server stops making answers it
    cannot send, and drops the connection after the send timeout."""
    request = b"GET /v2/models/add_sub/config HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((HOST, server.http_port)) as sock:
        sock.sendall(request)
        _, headers, _ = read_answer(sock)
    answer_bytes = int(headers["content-length"])  # the least one answer takes
    dropped = gauge(server, "inferplex_http_send_timeouts")
    with Watch(server.http_port) as watch:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((HOST, server.http_port))
        sock.setblocking(False)
        sent = 0
        for _ in range(200):  # as much as the server and the kernels take, 20000 at most
            try:
                sent += sock.send(request * 100)
            except BlockingIOError:
                time.sleep(0.05)
        deadline = time.monotonic() + 15  # the send timeout is 1 s
        held = 0.0  # the answers waiting for it are charged to the server-wide budget
        while gauge(server, "inferplex_http_send_timeouts") == dropped:
            assert time.monotonic() < deadline, "the connection was never dropped"
            held = max(held, gauge(server, "inferplex_http_buffered_bytes"))
            time.sleep(0.1)
        assert held > 0, "the unread answers were not charged"
        while gauge(server, "inferplex_http_buffered_bytes"):
            assert time.monotonic() < deadline, "the dropped answers' bytes were kept"
            time.sleep(0.05)
        sock.setblocking(True)
        sock.settimeout(10)
        received = 0
        try:
            while chunk := sock.recv(65536):
                received += len(chunk)
        except ConnectionError:
            pass
        sock.close()
    watch.check()
    assert received // answer_bytes < sent // len(request), "every request was answered"


# -- protocol ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /v2/health/live HTTP/1.1\r\n\r\n", 400),
        (b"GET /v2/health/live HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET /v2/health/live HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        (b"GET /v2/health/live HTTP/1.0\r\n\r\n", 200),
    ],
    ids=["no-host", "two-hosts", "http2-line", "http2-preface", "http1.0-without-host"],
)
def test_host_and_http_version(server: Server, request_bytes: bytes, status: int) -> None:
    with socket.create_connection((HOST, server.http_port)) as sock:
        sock.sendall(request_bytes)
        got, headers, _ = read_answer(sock)
    assert got == status
    if status != 200:
        assert headers["connection"] == "close"


@pytest.mark.parametrize(
    "path",
    [
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/add_sub",
        "/v2/models/add_sub/ready",
        "/v2/models/add_sub/config",
        "/v2/models/nope",
    ],
)
def test_head_answers_the_get_routes_with_their_length_and_no_body(
    server: Server, path: str
) -> None:
    with socket.create_connection((HOST, server.http_port)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        status, _, body = read_answer(sock)
        # HEAD, then a GET on the same connection: a body after the HEAD answer would be
        # read as the start of the next answer
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        data = b""
        while data.count(b"\r\n\r\n") < 2:
            data += sock.recv(65536)
    head, _, after = data.partition(b"\r\n\r\n")
    assert head.split()[1] == str(status).encode()
    length = re.search(rb"(?im)^content-length: (\d+)", head)
    assert length is not None and int(length.group(1)) == len(body)
    assert after.startswith(b"HTTP/1.1 200")  # nothing between the two answers


def test_head_on_a_post_route_is_405(server: Server) -> None:
    with socket.create_connection((HOST, server.http_port)) as sock:
        sock.sendall(b"HEAD /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(10)
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 405")


# -- buffered bytes ---------------------------------------------------------------------------
def test_uploads_past_the_server_wide_budget_get_503_and_leave_nothing_behind(
    server: Server,
) -> None:
    """The budget (8 MiB here) counts body bytes being read on every connection: a body that
    would pass it is refused before it is read, and a closed connection gives back its own.
    The client holding the budget keeps its body coming above the minimum rate: a stalled one
    would be cut by the body clock (408) and give its bytes back by itself."""
    head = (
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n"
    )
    with Watch(server.http_port) as watch:
        holder = socket.create_connection((HOST, server.http_port))
        holder.sendall(head.format(6 * MiB).encode() + b" " * (4 * MiB))
        # then 200 KB/s, well above the minimum rate, so that its body stays unfinished and
        # in time (10 s at most)
        stop = threading.Event()

        def trickle() -> None:
            for _ in range(100):
                if stop.wait(0.1):
                    return
                holder.sendall(b" " * 20_000)

        trickling = threading.Thread(target=trickle)
        trickling.start()
        try:
            deadline = time.monotonic() + 15
            while gauge(server, "inferplex_http_buffered_bytes") < 4 * MiB:
                assert time.monotonic() < deadline, "the partial upload was never buffered"
                time.sleep(0.05)
            with socket.create_connection((HOST, server.http_port)) as sock:
                sock.sendall(head.format(4 * MiB + MiB // 2).encode())
                status, headers, _ = read_answer(sock)
            assert status == 503 and headers["retry-after"] == "1"
        finally:
            stop.set()
            trickling.join()
            holder.close()
        while gauge(server, "inferplex_http_buffered_bytes") > 0:
            assert time.monotonic() < deadline, "a closed connection kept its bytes"
            time.sleep(0.05)
        with socket.create_connection((HOST, server.http_port)) as sock:
            sock.sendall(head.format(4 * MiB).encode() + b" " * (4 * MiB))
            status, _, _ = read_answer(sock)
        # read whole, then refused by the application: parsed, 4 MiB of JSON may take 16
        # times that, more than the whole budget (security/charges.py)
        assert status == 413
    watch.check()
    assert refusals(server, "server_buffer_full") >= 1


def test_the_limits_are_flags(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from inferplex.cli.main import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    for flag in (
        "--http-header-timeout-s",
        "--http-body-timeout-s",
        "--http-body-min-rate",
        "--http-keep-alive-s",
        "--http-send-timeout-s",
        "--http-connection-buffer-bytes",
        "--max-buffered-bytes",
    ):
        assert flag in result.output
    config = ServerConfig(model_repository=tmp_path)
    assert config.http_header_timeout_s == 10.0
    assert config.max_buffered_bytes == 1 << 30
