"""The HTTP/1.1 server's native way in (``respond``: a whole request in, a whole answer out,
no ASGI messages), over real loopback sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from inferplex.transport.http_cycle import Request
from inferplex.transport.http_server import HttpServer
from inferplex.transport.listener import ListenerSpec
from tests.unit.transport.test_http_server import HOST, post, read_response, split

Reply = tuple[int, bytes, list[tuple[bytes, bytes]]]


class Handler:
    """Echoes what it got; /fail raises; /slow waits until cancelled (and notes that); a
    request with a body to /private is refused before its body is read."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.admitted: list[str] = []

    def refusal(self, request: Request) -> Reply | None:
        if request.path == "/private":
            return 403, b'{"error": "no"}', []
        request.admitted = f"route of {request.path}"
        self.admitted.append(request.path)
        return None

    async def respond(self, request: Request) -> Reply:
        if request.path == "/fail":
            raise RuntimeError("boom")
        if request.path == "/slow":
            self.started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        body = orjson.dumps(
            {
                "method": request.method,
                "path": request.path,
                "raw_path": request.raw_path.decode(),
                "query": request.query.decode(),
                "body": bytes(request.body).decode(),
                "admitted": request.admitted,
            }
        )
        return 201, body, [(b"content-type", b"application/json"), (b"x-echo", b"1")]


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpServer, Handler, int]]:
    handler = Handler()
    sock = socket.socket()
    sock.bind((HOST, 0))
    sock.listen(16)
    sock.setblocking(False)
    server = HttpServer(handler, ListenerSpec(max_body_bytes=1 << 20))
    await server.start(sock)
    yield server, handler, sock.getsockname()[1]
    await server.stop(1.0)


async def test_whole_requests_in_whole_answers_out_in_order(served: Any) -> None:
    _, handler, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    large = b"x" * (100 << 10)  # above one read: admitted first, read into its own buffer
    writer.write(post("/a%20b?q=1", b"one") + post("/big", large))
    first, second = [split(await read_response(reader)) for _ in range(2)]
    writer.write(b"HEAD /c HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
    head = split(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5))
    get = split(await read_response(reader))
    writer.close()
    status, headers, body = first
    assert status == 201 and headers[b"x-echo"] == b"1"
    assert int(headers[b"content-length"]) == len(body)
    assert orjson.loads(body) == {
        "method": "POST",
        "path": "/a b",  # percent-decoded, raw_path as sent
        "raw_path": "/a%20b",
        "query": "q=1",
        "body": "one",
        "admitted": None,  # a small body comes with its head: no early admission
    }
    echoed = orjson.loads(second[2])
    assert echoed["body"] == large.decode() and echoed["admitted"] == "route of /big"
    assert handler.admitted == ["/big"]
    # HEAD: the answer's headers and length, no body (its echo says HEAD, one byte more)
    assert head[0] == 201 and head[2] == b"" and head[1][b"x-echo"] == b"1"
    assert int(head[1][b"content-length"]) == len(get[2]) + 1


async def test_a_refused_admission_is_answered_before_the_body_and_closes(served: Any) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(
        b"POST /private HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1000
    )
    status, headers, body = split(await read_response(reader))
    assert (status, body, headers[b"connection"]) == (403, b'{"error": "no"}', b"close")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


async def test_a_failing_handler_gets_500_and_the_connection_goes_on(served: Any) -> None:
    _, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/fail", b"") + post("/after", b"ok"))
    failed = split(await read_response(reader))
    after = split(await read_response(reader))
    writer.close()
    assert failed[0] == 500 and "internal server error" in orjson.loads(failed[2])["error"]
    assert after[0] == 201 and orjson.loads(after[2])["body"] == "ok"


async def test_a_client_that_goes_away_cancels_its_running_request(served: Any) -> None:
    _, handler, port = served
    _, writer = await asyncio.open_connection(HOST, port)
    writer.write(post("/slow", b""))
    await asyncio.wait_for(handler.started.wait(), 5)
    writer.close()
    await asyncio.wait_for(handler.cancelled.wait(), 5)


async def test_answers_during_shutdown_close_their_connection(served: Any) -> None:
    server, _, port = served
    reader, writer = await asyncio.open_connection(HOST, port)
    server.stopping = True
    writer.write(post("/last", b""))
    status, headers, _ = split(await read_response(reader))
    writer.close()
    assert status == 201 and headers[b"connection"] == b"close"
