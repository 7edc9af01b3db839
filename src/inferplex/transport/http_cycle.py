"""One request of the HTTP/1.1 server (http_server.py): as parsed (``Request``), as the
server answers it itself (``Refusal``), and as an application answers it: whole, through
the server's native way in (``answer``), or through ASGI ``receive`` and ``send``
(``Cycle``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

import orjson

from inferplex.transport.http_limits import TRIM_BYTES
from inferplex.transport.interface import ADMITTED_KEY, StreamedBody

if TYPE_CHECKING:
    from inferplex.transport.http_limits import ByteBudget, Http1Limits
    from inferplex.transport.interface import Answer, AsgiApp, NativeApp

logger = logging.getLogger("inferplex.transport.http_server")


class _Server(Protocol):
    @property
    def stopping(self) -> bool: ...

    @property
    def budget(self) -> ByteBudget: ...


class Host(Protocol):
    """What a connection reads and counts of its server (``http_server.HttpServer``)."""

    #: the server's counters, updated by its connections
    refusals: dict[str, int]
    send_timeouts: int

    @property
    def app(self) -> AsgiApp | None: ...
    @property
    def native(self) -> NativeApp | None: ...
    @property
    def admit(
        self,
    ) -> Callable[[Request], tuple[int, bytes, list[tuple[bytes, bytes]]] | None] | None: ...
    @property
    def budget(self) -> ByteBudget: ...
    @property
    def connections(self) -> set[Any]: ...
    @property
    def limits(self) -> Http1Limits: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def max_header_bytes(self) -> int: ...
    @property
    def read_buffer(self) -> memoryview: ...
    @property
    def scheme(self) -> str: ...
    @property
    def stopping(self) -> bool: ...


class Connection(Protocol):
    """What an answer is written through (``http_connection.Connection``)."""

    @property
    def server(self) -> _Server: ...

    @property
    def lost(self) -> bool: ...

    def answered(self, keep_alive: bool) -> None: ...

    def close(self) -> None: ...

    def disconnected(self) -> asyncio.Future[None]: ...

    def write(self, head: bytes, body: bytes) -> asyncio.Future[None] | None: ...


#: a native app's ``respond``, bound once per connection
Respond = Callable[["Request"], Awaitable["Answer"]]

_STATUS_LINES = {int(s): f"HTTP/1.1 {int(s)} {s.phrase}\r\n".encode("latin-1") for s in HTTPStatus}
_DISCONNECT = {"type": "http.disconnect"}
_JSON = (b"content-type", b"application/json")
#: the answer to a request its application left unanswered
_NO_RESPONSE = orjson.dumps({"error": "internal server error: the request got no response"})


def status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} \r\n".encode("latin-1")


class Request:
    """One parsed request (``transport.interface.HttpRequest``): its head, made when its
    header block is complete (or earlier, for the admission check), then its body;
    ``size`` is the body's bytes in the server's ByteBudget until the application gets it,
    ``admitted`` what the admission check returned, ``body_limit`` the most body bytes the
    admission check let it send (0: the server's limit) and ``body_limit_flag`` the setting
    that says so."""

    __slots__ = (
        "admitted",
        "body",
        "body_limit",
        "body_limit_flag",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "path",
        "query",
        "raw_path",
        "size",
    )

    def __init__(
        self, method: str, url: bytes, headers: list[tuple[bytes, bytes]], http_version: str
    ) -> None:
        raw_path, _, self.query = url.partition(b"?")
        self.raw_path = raw_path
        path = raw_path.decode("latin-1")
        self.path = unquote(path) if b"%" in raw_path else path
        self.method = method
        self.headers = headers
        self.http_version = http_version
        self.body: bytes | memoryview = b""
        self.keep_alive = True
        self.size = 0
        self.admitted: Any = None
        self.body_limit = 0
        self.body_limit_flag = ""


class Refusal:
    """An answer the server gives itself, then closes the connection: ``body`` is JSON."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or []

    def encode(self) -> bytes:
        """The whole answer: status line, headers, ``Connection: close`` and the body."""
        headers = [
            header
            for header in self.headers
            if header[0] not in (b"content-type", b"content-length", b"connection")
        ]
        headers.append(_JSON)
        return response_head(self.status, headers, len(self.body), close=True) + self.body


def response_head(
    status: int, headers: list[tuple[bytes, bytes]], length: int, close: bool
) -> bytes:
    """The status line and header block of a whole response of ``length`` bytes."""
    lines = [status_line(status)]
    lines.extend([b"%s: %s\r\n" % header for header in headers])
    lines.append(b"content-length: %d\r\n" % length)
    if close:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


async def answer(connection: Connection, request: Request, respond: Respond) -> None:
    """Run ``respond`` (a native app's) on ``request`` and write its answer in one go (no
    ASGI messages: the request is complete, the answer whole)."""
    try:
        status, body, headers = await respond(request)
    except Exception:
        logger.exception("the HTTP application failed")
        status, headers, body = 500, [_JSON], _NO_RESPONSE
    keep_alive = request.keep_alive and not connection.server.stopping
    if isinstance(body, StreamedBody):
        await _stream(connection, status, headers, body, keep_alive)
        return
    head = response_head(status, headers, len(body), not keep_alive)
    connection.write(head, b"" if request.method == "HEAD" else body)
    connection.answered(keep_alive)
    if len(body) >= TRIM_BYTES:  # a large answer's memory is free once it is sent
        connection.server.budget.freed(len(body))


async def _stream(
    connection: Connection,
    status: int,
    headers: list[tuple[bytes, bytes]],
    body: StreamedBody,
    keep_alive: bool,
) -> None:
    """Write a streamed body as chunks as they come, each once the transport has room (a
    client that does not read holds the producer back). A body that fails midway is cut
    off with the connection; a client that goes away cancels this task (the producer is
    closed)."""
    lines = [status_line(status), *(b"%s: %s\r\n" % header for header in headers)]
    lines.append(b"transfer-encoding: chunked\r\n")
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    connection.write(b"".join(lines) + b"\r\n", b"")
    chunks = body.chunks
    try:
        async for chunk in chunks:
            if chunk:
                drained = connection.write(b"%x\r\n" % len(chunk), chunk + b"\r\n")
                if drained is not None:
                    await drained
    except Exception:
        logger.exception("a streamed response failed midway")
        connection.close()
        connection.answered(False)
        return
    finally:
        await chunks.aclose()
    connection.write(b"0\r\n\r\n", b"")
    connection.answered(keep_alive)


class Cycle:
    """ASGI ``receive`` and ``send`` for one request."""

    __slots__ = (
        "_chunked",
        "_connection",
        "_done",
        "_head_only",
        "_headers",
        "_keep_alive",
        "_request",
        "_status",
    )

    def __init__(self, connection: Connection, request: Request) -> None:
        self._connection = connection
        self._request: Request | None = request
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] | None = None
        self._keep_alive = request.keep_alive
        self._head_only = request.method == "HEAD"
        self._chunked = False
        self._done = False

    async def receive(self) -> dict[str, Any]:
        request = self._request
        if request is not None:
            self._request = None
            return {"type": "http.request", "body": request.body, "more_body": False}
        await self._connection.disconnected()
        return _DISCONNECT

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self._headers is not None or self._status:
                raise RuntimeError("ASGI: http.response.start sent twice")
            self._status = message["status"]
            self._headers = list(message.get("headers", ()))
            return
        if kind != "http.response.body":
            raise RuntimeError(f"ASGI: unexpected message type {kind!r}")
        if self._done or not self._status:
            raise RuntimeError("ASGI: http.response.body outside a started response")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        head = self._head(len(body), more) if self._headers is not None else b""
        if self._head_only:
            body = b""
        elif self._chunked:
            body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + (
                b"" if more else b"0\r\n\r\n"
            )
        drained = self._connection.write(head, body)
        if not more:
            self._done = True
            self._connection.answered(self._keep_alive)
        elif drained is not None:
            await drained

    def _head(self, length: int, more: bool) -> bytes:
        """The status line and header block (once), with content-length or chunking."""
        headers = self._headers
        assert headers is not None
        self._headers = None
        lines = [status_line(self._status)]
        has_length = False
        for name, value in headers:
            lowered = name.lower()
            if lowered == b"content-length":
                has_length = True
            elif lowered == b"connection" and value.lower() == b"close":
                self._keep_alive = False
            lines.append(b"%s: %s\r\n" % (name, value))
        if not has_length:
            if more:
                self._chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
            else:
                lines.append(b"content-length: %d\r\n" % length)
        if not self._keep_alive or self._connection.server.stopping:
            self._keep_alive = False
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def finished(self, task: asyncio.Task[None]) -> None:
        """The application returned: a request it left unanswered gets a 500 (or, when it
        had started a response, the connection is closed)."""
        if task.cancelled():
            if self._connection.lost:
                return  # cancelled because the client went away: nobody to answer
            exc: BaseException | None = asyncio.CancelledError()
        else:
            exc = task.exception()
        if exc is not None:
            logger.error("the HTTP application failed", exc_info=exc)
        if self._done:
            return
        self._done = True
        connection = self._connection
        if self._headers is None and self._status:  # a response was started: cut it off
            connection.close()
            connection.answered(False)
            return
        head = response_head(500, [_JSON], len(_NO_RESPONSE), close=False)
        connection.write(head, _NO_RESPONSE)
        connection.answered(self._keep_alive)


_ASGI = {"version": "3.0", "spec_version": "2.3"}


def scope_base(transport: Any, scheme: str) -> dict[str, Any]:
    """What every ASGI scope of one connection holds."""
    return {
        "type": "http",
        "asgi": _ASGI,
        "scheme": scheme,
        "server": _address(transport.get_extra_info("sockname")),
        "client": _address(transport.get_extra_info("peername")),
        "root_path": "",
    }


def asgi_scope(base: dict[str, Any], request: Request) -> dict[str, Any]:
    """The ASGI scope of ``request`` on the connection whose ``scope_base`` is ``base``."""
    scope = dict(base)
    scope["http_version"] = request.http_version
    scope["method"] = request.method
    scope["path"] = request.path
    scope["raw_path"] = request.raw_path
    scope["query_string"] = request.query
    scope["headers"] = request.headers
    if request.admitted is not None:  # for transport.asgi.AsgiAdapter
        scope[ADMITTED_KEY] = (request.admitted, request.body_limit, request.body_limit_flag)
    return scope


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
