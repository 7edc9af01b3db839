"""The one ASGI adapter: a native app (``interface.NativeApp``: pre-body admission, then a
whole request in and a whole or streamed answer out) as an ASGI 3 callable, for uvicorn
(``--http-server uvicorn``) and the ASGI middleware the composition root puts around an app
(tracing).

It does what the built-in server does before it calls ``respond``: a request that comes
with a body is admitted first (``refusal``), so nothing is read from a client that may not
send it; the body is then read through ``receive`` up to the most its endpoint takes
(``request.body_limit``; else the listener's ``max_body_bytes``), a body above it refused
with 413 as soon as it is known to be, in the built-in server's words. A streamed answer
(``StreamedBody``) is sent as it comes: the server's ``send`` holds the producer back while
the client is behind, and a client that goes away stops it. Lifespan scopes are
acknowledged (the composition root owns the engine's life cycle); other scopes (websocket)
are refused by returning.

When the built-in server runs an ASGI middleware around a native app, it admits the request
itself before its body is read and puts the result under ``ADMITTED_KEY`` in the scope:
admitted once, whichever server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from inferplex.transport.interface import (
    ADMITTED_KEY,
    Answer,
    Headers,
    NativeApp,
    StreamedBody,
)

__all__ = ["AsgiAdapter", "AsgiRequest"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_DEFAULT_FLAG = "INFERPLEX_MAX_REQUEST_BYTES"
_JSON: Headers = [(b"content-type", b"application/json")]


class AsgiRequest:
    """An ASGI ``http`` scope as a native request (``interface.HttpRequest``); its body is
    set once read."""

    __slots__ = (
        "admitted",
        "body",
        "body_limit",
        "body_limit_flag",
        "headers",
        "method",
        "path",
        "query",
        "raw_path",
    )

    def __init__(self, scope: Scope) -> None:
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        raw_path = scope.get("raw_path")
        self.raw_path: bytes = raw_path if raw_path is not None else self.path.encode()
        self.query: bytes = scope.get("query_string", b"")
        self.headers: Headers = scope["headers"]
        self.body: bytes | memoryview = b""
        self.admitted: Any = None
        self.body_limit = 0
        self.body_limit_flag = ""


class AsgiAdapter:
    """``app`` as an ASGI 3 callable (see the module's docstring); ``max_body_bytes``: the
    most body bytes a request takes when its admission names no limit (the listener's)."""

    def __init__(self, app: NativeApp, max_body_bytes: int) -> None:
        self.app = app
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = AsgiRequest(scope)
        admitted = scope.get(ADMITTED_KEY)
        if admitted is not None:  # the built-in server admitted it before its body was read
            request.admitted, request.body_limit, request.body_limit_flag = admitted
        elif _has_body(request.headers):
            refusal = self.app.refusal(request)
            if refusal is not None:
                await _send_whole(send, refusal)
                return
        # (without Content-Length or Transfer-Encoding the body is empty: one message)
        limit = request.body_limit or self._max_body_bytes
        body = await _receive_body(receive, limit, request.body_limit_flag or _DEFAULT_FLAG)
        if body is None:
            return  # the client went away before its body was whole
        if isinstance(body, tuple):
            await _send_whole(send, body)
            return
        request.body = body
        answer = await self.app.respond(request)
        if isinstance(answer[1], StreamedBody):
            await _send_streamed(answer[0], answer[2], answer[1], receive, send)
        else:
            await _send_whole(send, answer)


def _has_body(headers: Headers) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False


async def _receive_body(
    receive: Receive, limit: int, flag: str
) -> bytes | tuple[int, bytes, Headers] | None:
    """The body of a request, or the 413 refusing it as soon as it is known to be above
    ``limit`` (never holding more than the limit); None when the client went away."""
    size = 0
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            text = f"request body of at least {size} bytes is above the limit of {limit} bytes"
            return 413, orjson.dumps({"error": f"{text} ({flag})"}), _JSON
        chunks.append(chunk)
        more = message.get("more_body", False)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _send_whole(send: Send, answer: Answer | tuple[int, bytes, Headers]) -> None:
    status, body, headers = answer
    assert not isinstance(body, StreamedBody)
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_streamed(
    status: int, headers: Headers, body: StreamedBody, receive: Receive, send: Send
) -> None:
    """An ASGI response sent as its body comes (the server's ``send`` waits while the client
    is behind); a client that goes away (``http.disconnect``) stops it, and the producer is
    closed."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    watcher = asyncio.ensure_future(_disconnect(receive))
    chunks = body.chunks
    try:
        while True:
            step = asyncio.ensure_future(anext(chunks, None))
            await asyncio.wait((step, watcher), return_when=asyncio.FIRST_COMPLETED)
            if not step.done():  # the client went away
                step.cancel()
                return
            chunk = step.result()
            if chunk is None:
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        watcher.cancel()
        await chunks.aclose()


async def _disconnect(receive: Receive) -> None:
    """Until the client goes away (its body was read whole before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge start-up and shut-down: the composition root owns the engine's lifecycle."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
