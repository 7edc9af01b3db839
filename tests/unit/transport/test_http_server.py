"""The HTTP/1.1 server under an ASGI app, over real loopback sockets."""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from inferplex.transport.http_limits import Http1Limits
from inferplex.transport.http_server import HttpServer
from inferplex.transport.listener import ListenerSpec, TlsFiles

HOST = "127.0.0.1"


class EchoApp:
    """Answers with what it saw; /fail raises, /stream streams, /slow waits for a release."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        path = scope["path"]
        if path == "/fail":
            raise RuntimeError("boom")
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ab", "more_body": True})
            await send({"type": "http.response.body", "body": b"cd", "more_body": False})
            return
        if path == "/slow":
            self.started.set()
            await self.release.wait()
        if path == "/digest":  # large bodies: their length and digest
            data = message["body"]
            digest = hashlib.sha256(data).hexdigest()
            body = orjson.dumps({"length": len(data), "sha256": digest})
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        body = orjson.dumps(
            {
                "method": scope["method"],
                "path": path,
                "query": scope["query_string"].decode(),
                "body": message["body"].decode(),
                "client": scope["client"][0],
            }
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpServer, EchoApp, int]]:
    app = EchoApp()
    sock = socket.socket()
    sock.bind((HOST, 0))
    sock.listen(16)
    sock.setblocking(False)
    spec = ListenerSpec(
        max_body_bytes=1000, max_header_bytes=2000, http1=Http1Limits(keep_alive_s=0.3)
    )
    server = HttpServer(None, spec, asgi=app)
    await server.start(sock)
    yield server, app, sock.getsockname()[1]
    await server.stop(1.0)


async def exchange(port: int, data: bytes, until_closed: bool = False) -> bytes:
    """Send ``data``; read one response (by content-length or chunks), or all until EOF."""
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(data)
    await writer.drain()
    try:
        if until_closed:
            return await asyncio.wait_for(reader.read(), 5)
        return await read_response(reader)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    if head.startswith(b"HTTP/1.1 100"):
        return head + await read_response(reader)
    headers = parse_headers(head)
    if headers.get(b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return head + body
            body += chunk[:-2]
    return head + await reader.readexactly(int(headers.get(b"content-length", b"0")))


def parse_headers(head: bytes) -> dict[bytes, bytes]:
    lines = head.split(b"\r\n")[1:]
    return {k.lower(): v for k, _, v in (line.partition(b": ") for line in lines if line)}


def split(response: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), parse_headers(head + b"\r\n\r\n"), body


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
        + body
    )


async def test_keep_alive_and_pipelined_requests_are_answered_in_order(served: Any) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/a?x=1", b"one") + post("/b%20c", b"two"))
    first = split(await read_response(reader))
    second = split(await read_response(reader))
    writer.write(b"GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
    third = split(await read_response(reader))
    writer.close()
    assert first[0] == 200 and orjson.loads(first[2]) == {
        "method": "POST",
        "path": "/a",
        "query": "x=1",
        "body": "one",
        "client": HOST,
    }
    assert orjson.loads(second[2])["path"] == "/b c"  # percent-decoded, like ASGI says
    assert orjson.loads(third[2])["method"] == "GET"
    assert first[1][b"content-length"] == str(len(first[2])).encode()


async def test_connections_cut_mid_request_interleave_on_the_shared_read_buffer(
    served: Any,
) -> None:
    """Every connection reads into the server's one buffer: a request half read on one
    connection must survive reads of others before its rest arrives."""
    _, _, port = served
    first, second = post("/first", b"one" * 50), post("/second", b"two" * 60)
    streams = [await asyncio.open_connection(HOST, port) for _ in range(2)]
    for cut in (5, len(first) // 2, len(first) - 3):
        for (_, writer), request in zip(streams, (first, second), strict=True):
            writer.write(request[:cut])
            await writer.drain()
            await asyncio.sleep(0.01)  # read by the server before the other's bytes
        for (_, writer), request in zip(streams, (first, second), strict=True):
            writer.write(request[cut:])
            await writer.drain()
        for (reader, _), path, body in zip(
            streams, ("/first", "/second"), ("one" * 50, "two" * 60), strict=True
        ):
            answer = orjson.loads(split(await read_response(reader))[2])
            assert (answer["path"], answer["body"]) == (path, body)
    for _, writer in streams:
        writer.close()


async def test_http10_and_connection_close_end_the_connection(served: Any) -> None:
    _, _, port = served
    for request in (
        b"GET /a HTTP/1.0\r\n\r\n",
        b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    ):
        status, headers, body = split(await exchange(port, request, until_closed=True))
        assert status == 200 and headers[b"connection"] == b"close"
        assert orjson.loads(body)["path"] == "/a"


async def test_a_chunked_request_body_arrives_whole(served: Any) -> None:
    _, _, port = served
    request = (
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    _, _, body = split(await exchange(port, request))
    assert orjson.loads(body)["body"] == "abcde"


async def test_expect_continue_gets_an_interim_answer(served: Any) -> None:
    _, _, port = served
    response = await exchange(port, post("/a", b"xy", "Expect: 100-continue\r\n"))
    assert response.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")


async def test_head_has_the_length_but_no_body(served: Any) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert int(parse_headers(head)[b"content-length"]) > 0
    status, _, body = split(await read_response(reader))  # next answer follows directly
    writer.close()
    assert status == 200 and orjson.loads(body)["path"] == "/b"


async def test_malformed_requests_get_400_and_the_connection_closes(served: Any) -> None:
    _, _, port = served
    status, headers, body = split(await exchange(port, b"NOT HTTP\r\n\r\n", until_closed=True))
    assert status == 400 and headers[b"connection"] == b"close"
    assert "malformed HTTP request" in orjson.loads(body)["error"]


async def test_headers_above_the_limit_get_431(served: Any) -> None:
    _, _, port = served
    request = b"GET /a HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 3000 + b"\r\n\r\n"
    status, _, body = split(await exchange(port, request, until_closed=True))
    assert status == 431 and "2000 bytes" in orjson.loads(body)["error"]


async def test_bodies_above_the_limit_get_413_before_they_are_read(served: Any) -> None:
    _, _, port = served
    # announced: refused at the headers, the body never sent
    request = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"
    status, _, body = split(await exchange(port, request, until_closed=True))
    assert status == 413 and "Content-Length 5000" in orjson.loads(body)["error"]
    # chunked: refused as it grows past the limit
    chunked = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunked += b"400\r\n" + b"z" * 1024 + b"\r\n"
    status, _, body = split(await exchange(port, chunked, until_closed=True))
    assert status == 413 and "INFERPLEX_MAX_REQUEST_BYTES" in orjson.loads(body)["error"]


async def test_an_app_error_is_a_500_and_the_connection_lives_on(
    served: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = split(await read_response(reader))
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    after = split(await read_response(reader))
    writer.close()
    assert status == 500 and "no response" in orjson.loads(body)["error"]
    assert after[0] == 200
    assert "boom" in caplog.text


async def test_a_streamed_response_is_sent_chunked(served: Any) -> None:
    _, _, port = served
    status, headers, body = split(
        await exchange(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", until_closed=False)
    )
    assert status == 200 and headers[b"transfer-encoding"] == b"chunked"
    assert body == b"abcd"  # read_response joined the chunks


async def test_idle_keep_alive_connections_are_closed(served: Any) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
    await read_response(reader)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    writer.close()


async def test_stop_finishes_requests_in_flight_and_refuses_new_connections(
    served: Any,
) -> None:
    server, app, port = served
    slow = asyncio.create_task(exchange(port, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
    await asyncio.wait_for(app.started.wait(), 5)
    stopping = asyncio.create_task(server.stop(5.0))
    await asyncio.sleep(0.05)
    with pytest.raises(OSError):
        await asyncio.open_connection(HOST, port)
    app.release.set()
    status, headers, _ = split(await slow)
    await stopping
    assert status == 200 and headers[b"connection"] == b"close"


def test_a_tls_peer_that_never_closes_holds_neither_stop_nor_the_loop_s_close(
    tmp_path: Any,
) -> None:
    """A TLS close waits for the peer's close_notify. With a client that keeps its socket open
    and never reads, the server's stop must still end, and so must closing the event loop
    (uvloop's close runs the loop until every handle is closed)."""
    import ssl
    import threading

    import uvloop

    from tests.support.certs import make_certificates

    certs = make_certificates(tmp_path)
    client = ssl.create_default_context(cafile=str(certs.ca))
    held: list[socket.socket] = []

    def request_and_hold(port: int) -> bytes:
        tls = client.wrap_socket(socket.create_connection((HOST, port)), server_hostname=HOST)
        held.append(tls)
        tls.sendall(post("/a", b"x"))
        return tls.recv(4096)

    async def serve_one_request() -> None:
        sock = socket.socket()
        sock.bind((HOST, 0))
        sock.listen(4)
        sock.setblocking(False)
        tls = TlsFiles(certs.server_cert, certs.server_key)
        server = HttpServer(None, ListenerSpec(max_body_bytes=1000, tls=tls), asgi=EchoApp())
        await server.start(sock)
        answer = await asyncio.to_thread(request_and_hold, sock.getsockname()[1])
        assert answer.startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(server.stop(30.0), 10)
        assert not server.connections

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(serve_one_request())
        closing = threading.Thread(target=loop.close, daemon=True)
        closing.start()
        closing.join(10)
        assert not closing.is_alive(), "the event loop's close hangs on a TLS connection"
    finally:
        for sock in held:
            sock.close()


# -- large bodies: many reads each, cut anywhere, pipelined, behind 100-continue and TLS ----------
def digest_of(body: bytes) -> dict[str, Any]:
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


async def large_bodies(port: int, tls: Any = None) -> None:
    """Bodies from 64 KiB to 1 MB (many socket reads each), sent whole, in small pieces and
    pipelined with small requests, on one keep-alive connection."""
    reader, writer = await asyncio.open_connection(HOST, port, ssl=tls)
    sizes = (64 * 1024, 70_000, 300_000, 1_000_003)
    bodies = [bytes((i * 7 + n) % 251 for i in range(n)) for n in sizes]
    try:
        for body in bodies:  # whole: the first read holds the headers and part of the body
            writer.write(post("/digest", body))
            assert orjson.loads(split(await read_response(reader))[2]) == digest_of(body)
        for body in bodies[1:3]:  # in pieces: the headers alone, then 7 KB at a time
            request = post("/digest", body)
            head = request.index(b"\r\n\r\n") + 4
            writer.write(request[:head])
            await writer.drain()
            for start in range(head, len(request), 7000):
                writer.write(request[start : start + 7000])
                await writer.drain()
                await asyncio.sleep(0)
            assert orjson.loads(split(await read_response(reader))[2]) == digest_of(body)
        # pipelined: each large body ends where the next request begins
        writer.write(
            post("/digest", bodies[2])
            + post("/a", b"small")
            + post("/digest", bodies[1])
            + post("/b", b"tail")
        )
        answers = [split(await read_response(reader))[2] for _ in range(4)]
        assert orjson.loads(answers[0]) == digest_of(bodies[2])
        assert orjson.loads(answers[1])["body"] == "small"
        assert orjson.loads(answers[2]) == digest_of(bodies[1])
        assert orjson.loads(answers[3])["body"] == "tail"
        # Expect: 100-continue: the body follows the interim answer
        body = bodies[2]
        writer.write(
            post("/digest", b"", "Expect: 100-continue\r\n").replace(
                b"Content-Length: 0", b"Content-Length: %d" % len(body)
            )
        )
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100")
        writer.write(body)
        assert orjson.loads(split(await read_response(reader))[2]) == digest_of(body)
    finally:
        writer.close()
    # a client gone halfway through a large body leaves the server serving others
    _, gone = await asyncio.open_connection(HOST, port, ssl=tls)
    gone.write(post("/digest", bodies[3])[:200_000])
    await gone.drain()
    gone.close()
    reader, writer = await asyncio.open_connection(HOST, port, ssl=tls)
    try:
        writer.write(post("/digest", bodies[1]))
        assert orjson.loads(split(await read_response(reader))[2]) == digest_of(bodies[1])
    finally:
        writer.close()


async def serve_large(tls: TlsFiles | None = None) -> tuple[HttpServer, int]:
    sock = socket.socket()
    sock.bind((HOST, 0))
    sock.listen(16)
    sock.setblocking(False)
    server = HttpServer(None, ListenerSpec(max_body_bytes=4 << 20, tls=tls), asgi=EchoApp())
    await server.start(sock)
    return server, sock.getsockname()[1]


async def test_large_bodies_arrive_whole_however_they_are_cut() -> None:
    server, port = await serve_large()
    try:
        await large_bodies(port)
        # a body above the limit is still refused from its Content-Length
        response = await exchange(
            port,
            post("/digest", b"x" * 10, "").replace(
                b"Content-Length: 10", b"Content-Length: %d" % (5 << 20)
            ),
            until_closed=True,
        )
        assert split(response)[0] == 413
    finally:
        await server.stop(1.0)


def test_large_bodies_on_uvloop_over_tcp_and_tls(tmp_path: Any) -> None:
    """The server's own loop (uvloop), plain and with TLS in between."""
    import ssl

    import uvloop

    from tests.support.certs import make_certificates

    certs = make_certificates(tmp_path)
    client = ssl.create_default_context(cafile=str(certs.ca))

    async def both() -> None:
        for server_tls, client_tls in (
            (None, None),
            (TlsFiles(certs.server_cert, certs.server_key), client),
        ):
            server, port = await serve_large(server_tls)
            try:
                await large_bodies(port, client_tls)
            finally:
                await server.stop(1.0)

    uvloop.run(both())
