"""What one client can make the HTTP/1.1 server hold (issue 18, parts 2 and 5), over real
loopback sockets: each bound answers with its status as soon as it is passed, and gives back
what it held. Clocks are short here; no test relies on timing beyond generous deadlines."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest

from inferplex.transport.http_limits import ByteBudget, Http1Limits
from inferplex.transport.http_server import HttpServer
from inferplex.transport.listener import ListenerSpec
from tests.unit.transport.test_http_server import EchoApp, post, read_response, split

HOST = "127.0.0.1"
HEADERS = 2000  # max_header_bytes of these servers
#: a deadline for things that take a fraction of a second on a quiet machine
DEADLINE_S = 10.0


class BigApp(EchoApp):
    """EchoApp, plus /big: a 4 MB answer; counts the requests it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.calls += 1
        if scope["path"] == "/big":
            await receive()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"z" * (4 << 20)})
            return
        await super().__call__(scope, receive, send)


Serve = Callable[..., Awaitable[tuple[HttpServer, BigApp, int]]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start servers with the given limits; stopped after the test."""
    servers: list[HttpServer] = []

    async def start(
        max_body_bytes: int = 1 << 20, budget: ByteBudget | None = None, **limits: Any
    ) -> tuple[HttpServer, BigApp, int]:
        app = BigApp()
        sock = socket.socket()
        sock.bind((HOST, 0))
        sock.listen(64)
        sock.setblocking(False)
        settings = {"header_timeout_s": 5.0, "keep_alive_s": 5.0, **limits}
        server = HttpServer(
            None,
            ListenerSpec(
                max_body_bytes=max_body_bytes,
                max_header_bytes=HEADERS,
                http1=Http1Limits(**settings),
            ),
            asgi=app,
            budget=budget,
        )
        await server.start(sock)
        servers.append(server)
        return server, app, sock.getsockname()[1]

    yield start
    for server in servers:
        await server.stop(1.0)


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes], Any]:
    status, headers, body = split(await read_response(reader))
    return status, headers, orjson.loads(body) if body else None


async def trickle(
    writer: asyncio.StreamWriter,
    reader: asyncio.StreamReader,
    piece: bytes,
    times: int,
    pause: float = 0.0,
) -> int:
    """Send ``piece`` up to ``times`` times, each in its own read of the server, stopping as
    soon as the server answers or closes; how many were sent."""
    for sent in range(times):
        if reader.at_eof() or len(reader._buffer):  # type: ignore[attr-defined]
            return sent
        try:
            writer.write(piece)
            await writer.drain()
        except ConnectionError:
            return sent
        await asyncio.sleep(pause or 0.005)
    return times


async def is_closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    except ConnectionError:
        return True


# -- the request head, counted as it arrives ------------------------------------------------
async def test_a_request_line_that_never_ends_gets_414_once_past_the_limit(serve: Serve) -> None:
    server, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /")
    sent = await trickle(writer, reader, b"a" * 500, 400)  # up to 200 KB, no line end
    status, headers, body = await answer(reader)
    writer.close()
    assert status == 414 and headers[b"connection"] == b"close"
    assert "request line" in body["error"]
    assert sent * 500 <= HEADERS + 64 * 1024  # refused as it passed the limit, not at the end
    assert server.refusals["uri_too_long"] == 1


@pytest.mark.parametrize("piece", [500, 64 * 1024], ids=["small-reads", "full-reads"])
async def test_a_header_that_never_ends_gets_431_once_past_the_limit(
    serve: Serve, piece: int
) -> None:
    """httptools keeps an unfinished header to itself and re-joins it on every read: the
    server counts those reads' bytes instead (a 32 MB header took 7.3 s of CPU)."""
    server, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\nX-Long: ")
    sent = await trickle(writer, reader, b"v" * piece, (4 << 20) // piece)
    status, _, body = await answer(reader)
    writer.close()
    assert status == 431 and f"{HEADERS} bytes" in body["error"]
    assert sent * piece <= HEADERS + 3 * 64 * 1024
    assert server.refusals["header_too_large"] == 1


async def test_heads_split_across_reads_are_counted_per_request(serve: Serve) -> None:
    """A keep-alive connection sends, in small reads, more head bytes in all than one head
    may have: each request starts its count afresh."""
    _, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    request = b"GET /a HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 400 + b"\r\n\r\n"
    for _ in range(3 * HEADERS // len(request)):
        for start in range(0, len(request), 50):
            writer.write(request[start : start + 50])
            await writer.drain()
            await asyncio.sleep(0.002)
        status, _, _ = await answer(reader)
        assert status == 200
    writer.close()


async def test_many_tiny_headers_count_their_lines(serve: Serve) -> None:
    _, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n" + b"a:\r\n" * 1000 + b"\r\n")
    status, _, _ = await answer(reader)
    writer.close()
    assert status == 431


async def test_a_refusal_reaches_a_client_that_goes_on_sending(serve: Serve) -> None:
    """The server half-closes after a refusal and drops what still comes: closing with the
    client's bytes unread would reset the connection and could lose the answer."""
    _, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /" + b"a" * 300_000)  # all at once, far past the limit
    await writer.drain()
    status, _, _ = await answer(reader)
    assert status == 414
    assert await is_closed(reader)
    writer.close()


# -- clocks ---------------------------------------------------------------------------------
async def test_a_header_block_that_trickles_in_gets_408(serve: Serve) -> None:
    """One header line every 0.1 s kept a connection open for ever."""
    server, _, port = await serve(header_timeout_s=0.5, keep_alive_s=0.3)
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n")
    sent = await trickle(writer, reader, b"X-A: b\r\n", 100, pause=0.1)
    status, _, body = await answer(reader)
    writer.close()
    assert status == 408 and "header block" in body["error"]
    assert sent < 100
    assert server.refusals["header_timeout"] == 1


async def test_blank_lines_do_not_keep_a_connection_open(serve: Serve) -> None:
    """Blank lines before a request are skipped by the parser: they are no request, and the
    keep-alive clock runs through them."""
    _, _, port = await serve(keep_alive_s=0.3)
    reader, writer = await asyncio.open_connection(HOST, port)
    sent = await trickle(writer, reader, b"\r\n", 200, pause=0.05)
    assert sent < 200
    assert await is_closed(reader)
    writer.close()


async def test_connections_that_never_send_a_byte_are_closed(serve: Serve) -> None:
    server, _, port = await serve(keep_alive_s=0.3)
    streams = [await asyncio.open_connection(HOST, port) for _ in range(20)]
    for reader, writer in streams:
        assert await is_closed(reader)
        writer.close()
    assert not server.connections


async def test_a_body_slower_than_the_minimum_rate_gets_408(serve: Serve) -> None:
    server, _, port = await serve(body_timeout_s=0.4, body_min_rate=1000)
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n")
    sent = await trickle(writer, reader, b"b" * 5, 200, pause=0.05)
    status, _, body = await answer(reader)
    writer.close()
    assert status == 408 and "bytes/s" in body["error"]
    assert sent < 200
    assert server.refusals["body_timeout"] == 1
    assert server.budget.used == 0


async def test_a_body_that_stops_gets_408_and_one_that_keeps_up_arrives(serve: Serve) -> None:
    server, _, port = await serve(body_timeout_s=0.3, body_min_rate=1000)
    # a large body (read into its own buffer) whose client stops half-way
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/digest", b"c" * 200_000)[:100_000])
    status, _, _ = await answer(reader)
    writer.close()
    assert status == 408
    # one that keeps above the rate for longer than a window is served
    reader, writer = await asyncio.open_connection(HOST, port)
    request = post("/a", b"d" * 900)
    for start in range(0, len(request), 100):
        writer.write(request[start : start + 100])
        await writer.drain()
        await asyncio.sleep(0.05)
    status, _, body = await answer(reader)
    writer.close()
    assert status == 200 and body["body"] == "d" * 900
    assert server.budget.used == 0


async def test_a_client_that_does_not_read_its_answers_is_dropped(serve: Serve) -> None:
    """Its answers would otherwise wait in memory for ever; no further request of its
    pipeline is run while the first answer cannot be sent."""
    server, app, port = await serve(send_timeout_s=0.5)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((HOST, port))
    sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n" * 5)  # never read
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not app.calls and loop.time() < deadline:  # accepted, and the first one runs
        await asyncio.sleep(0.01)
    while server.connections and loop.time() < deadline:
        await asyncio.sleep(0.05)
    sock.close()
    assert not server.connections
    assert server.send_timeouts == 1
    assert app.calls == 1


# -- the request line and Host ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /a HTTP/1.1\r\n\r\n", 400),
        (b"GET /a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET /a HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET /a HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        (b"GET /a HTTP/1.2\r\nHost: x\r\n\r\n", 505),
        (b"GET /a\r\n\r\n", 505),
        (b"GET /a HTTP/1.0\r\n\r\n", 200),
    ],
    ids=["no-host", "two-hosts", "two-hosts-1.0", "h2", "preface", "1.2", "0.9", "1.0"],
)
async def test_host_and_version_are_checked(
    serve: Serve, request_bytes: bytes, status: int
) -> None:
    server, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(request_bytes)
    got, headers, _ = await answer(reader)
    writer.close()
    assert got == status
    if status != 200:
        assert headers[b"connection"] == b"close"
        reason = "missing_host" if status == 400 else "http_version"
        assert server.refusals[reason] == 1


async def test_head_of_a_streamed_answer_has_no_body(serve: Serve) -> None:
    _, _, port = await serve()
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE_S)
    status, _, body = await answer(reader)  # the next answer follows the header block
    writer.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert status == 200 and body["path"] == "/a"


# -- buffered bytes -----------------------------------------------------------------------------
async def test_pipelined_bodies_behind_a_running_request_pause_the_reading(
    serve: Serve,
) -> None:
    """Ten 300 KB requests pipelined behind one the application holds: the connection stops
    being read once it buffers its limit, and every request is answered once released."""
    cap = 200_000
    server, app, port = await serve(connection_buffer_bytes=cap)
    reader, writer = await asyncio.open_connection(HOST, port)
    bodies = [bytes([65 + n]) * 300_000 for n in range(10)]
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(app.started.wait(), DEADLINE_S)
    for body in bodies:
        writer.write(post("/digest", body))
    held = []
    for _ in range(20):  # the client's writes fill what the server and the kernels take
        await asyncio.sleep(0.02)
        held.append(server.budget.used)
    assert max(held) <= cap + 2 * 64 * 1024
    app.release.set()
    status, _, _ = await answer(reader)
    assert status == 200
    for body in bodies:
        _, _, digest = await answer(reader)
        assert digest["length"] == len(body)
    writer.close()
    assert server.budget.used == 0


async def test_bodies_past_the_server_wide_budget_get_503_and_are_given_back(
    serve: Serve,
) -> None:
    budget = ByteBudget(300_000)
    server, _, port = await serve(budget=budget)
    # one client holds 200 KB of a 250 KB body
    _, holder = await asyncio.open_connection(HOST, port)
    holder.write(post("/digest", b"h" * 250_000)[:200_100])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while budget.used < 200_000 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert budget.used >= 200_000
    # a declared body that does not fit: refused before it is read
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/digest", b"x" * 150_000)[:200])
    status, headers, body = await answer(reader)
    writer.close()
    assert status == 503 and headers[b"retry-after"] == b"1"
    assert "INFERPLEX_MAX_BUFFERED_BYTES" in body["error"]
    # a chunked one that grows past it
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (50_000, b"y" * 50_000)
    await trickle(writer, reader, chunk, 10)
    status, _, _ = await answer(reader)
    writer.close()
    assert status == 503
    assert server.refusals["server_buffer_full"] == 2
    # the holder goes away: its bytes are given back and a body fits again
    holder.close()
    deadline = loop.time() + DEADLINE_S
    while budget.used and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert budget.used == 0
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/digest", b"z" * 150_000))
    status, _, body = await answer(reader)
    writer.close()
    assert status == 200 and body["length"] == 150_000


async def test_a_refused_admission_frees_its_body_and_is_counted(serve: Serve) -> None:
    server, _, port = await serve()
    server.admit = lambda scope: (403, b'{"error": "no"}', [])
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/a", b"q" * (64 << 10)))
    status, _, _ = await answer(reader)
    writer.close()
    assert status == 403
    assert server.refusals["admission"] == 1 and server.budget.used == 0
