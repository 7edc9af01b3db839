"""The ASGI edge of the uvicorn twin (transport/uvicorn_http.py): the built-in server's
answers that uvicorn does not give, checked without sockets."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import orjson

from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.uvicorn_http import _Edge

Message = MutableMapping[str, Any]


class App:
    """Answers 200 after reading ``reads`` body messages (0: without reading the body)."""

    def __init__(self, reads: int = 0) -> None:
        self.reads = reads
        self.called = False

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        self.called = True
        for _ in range(self.reads):
            await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def scope(
    path: bytes = b"/v2/models/m/infer", version: str = "1.1", hosts: int = 1, **headers: str
) -> Message:
    fields = [(b"host", b"h")] * hosts
    return {
        "type": "http",
        "http_version": version,
        "method": "POST",
        "path": path.decode(),
        "raw_path": path,
        "query_string": b"",
        "headers": fields
        + [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }


async def run(edge: _Edge, request: Message, body: list[Message]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return body.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    await edge(request, receive, send)
    return sent


def header(message: Message, name: bytes) -> bytes | None:
    return dict(message.get("headers", [])).get(name)


async def test_a_request_line_or_header_block_above_the_limit_is_refused() -> None:
    refusals: dict[str, int] = {}
    app = App()
    edge = _Edge(app, 100, refusals)
    sent = await run(edge, scope(b"/" + b"a" * 100), [])
    assert sent[0]["status"] == 414
    sent = await run(edge, scope(x_big="x" * 80), [])
    assert sent[0]["status"] == 431
    assert header(sent[0], b"connection") == b"close"
    assert "INFERPLEX_MAX_HEADER_BYTES" in orjson.loads(sent[1]["body"])["error"]
    assert refusals == {"uri_too_long": 1, "header_too_large": 1}
    assert not app.called
    sent = await run(edge, scope(x_small="x"), [])
    assert sent[0]["status"] == 200
    assert app.called


async def test_an_answer_before_the_body_was_read_closes_the_connection() -> None:
    edge = _Edge(App(reads=0), 0, {})
    sent = await run(edge, scope(content_length="10"), [])
    assert header(sent[0], b"connection") == b"close"
    partly = [{"type": "http.request", "body": b"x", "more_body": True}]
    sent = await run(_Edge(App(reads=1), 0, {}), scope(transfer_encoding="chunked"), partly)
    assert header(sent[0], b"connection") == b"close"


async def test_an_answer_after_the_whole_body_keeps_the_connection() -> None:
    whole = [{"type": "http.request", "body": b"x" * 10, "more_body": False}]
    sent = await run(_Edge(App(reads=1), 0, {}), scope(content_length="10"), whole)
    assert header(sent[0], b"connection") is None
    sent = await run(_Edge(App(reads=0), 0, {}), scope(content_length="0"), [])
    assert header(sent[0], b"connection") is None


async def test_bodies_past_the_server_wide_budget_get_503_and_give_their_bytes_back() -> None:
    budget = ByteBudget(100)
    budget.used = 60  # held by other requests
    refusals: dict[str, int] = {}
    app = App(reads=1)
    edge = _Edge(app, 0, refusals, budget)
    sent = await run(edge, scope(content_length="50"), [])  # announced: refused unread
    assert sent[0]["status"] == 503 and header(sent[0], b"retry-after") == b"1"
    assert "INFERPLEX_MAX_BUFFERED_BYTES" in orjson.loads(sent[1]["body"])["error"]
    assert not app.called
    pieces = [{"type": "http.request", "body": b"x" * 50, "more_body": False}]
    sent = await run(edge, scope(transfer_encoding="chunked"), pieces)  # found as it comes
    assert [m.get("status") for m in sent[:1]] == [503] and len(sent) == 2
    assert refusals == {"server_buffer_full": 2}
    whole = [{"type": "http.request", "body": b"x" * 30, "more_body": False}]
    sent = await run(edge, scope(content_length="30"), whole)
    assert sent[0]["status"] == 200
    assert budget.used == 60  # what the requests held is given back when they end


async def test_a_request_without_exactly_one_host_is_refused() -> None:
    """RFC 9112 3.2, as the built-in server answers it: uvicorn itself serves such requests."""
    refusals: dict[str, int] = {}
    app = App()
    edge = _Edge(app, 0, refusals)
    for hosts in (0, 2):
        sent = await run(edge, scope(hosts=hosts), [])
        assert sent[0]["status"] == 400
        assert header(sent[0], b"connection") == b"close"
        assert "Host" in orjson.loads(sent[1]["body"])["error"]
    assert refusals == {"missing_host": 2}
    assert not app.called
    sent = await run(edge, scope(version="1.0", hosts=0), [])  # HTTP/1.0 may leave it out
    assert sent[0]["status"] == 200
