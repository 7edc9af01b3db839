"""A small HTTP/1.1 server for ASGI applications: asyncio protocol + httptools, one socket
write per response.

Why not uvicorn (DESIGN.md's first choice): per request, uvicorn builds its scope, a
RequestResponseCycle, a flow-control object and a keep-alive timer, and runs the application
through receive/send coroutines that pass through several layers; on a 2-core machine that
was about half of the server's CPU per inference request. This server keeps what our
applications use of ASGI 3 (``http`` scopes, one complete request body, a response start and
body) and does the rest once per connection: bodies are collected by the parser (limits are
enforced as they arrive; a large body is read from the socket straight into its own buffer,
see ``_Connection``), the response's header block and body leave in one ``write``,
keep-alive expiry is one sweep a second (at most) for all connections, and shutdown drains in-flight
requests. ``bench/http_server.py`` measures it against uvicorn side by side.

Kept from HTTP/1.1: keep-alive and ``Connection: close``, HTTP/1.0, pipelined requests
(answered in order), chunked request bodies, ``Expect: 100-continue``, ``HEAD``, streamed
responses (``more_body``, sent chunked), back-pressure (a paused transport pauses ``send``).
Refused at the protocol level, each with ``{"error": ...}`` and the connection closed: a
malformed request (400), headers above the limit (431), a body above the limit (413).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable, Coroutine
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools
import orjson

from inferplex.frontends.buffers import uninitialised

__all__ = ["HttpServer"]

logger = logging.getLogger(__name__)

App = Callable[[dict[str, Any], Any, Any], Coroutine[Any, Any, None]]
#: sees the scope of a request with a body once its headers are complete, before any of the
#: body is read: returns None to go on, or (status, body, headers) to refuse it
Admit = Callable[[dict[str, Any]], tuple[int, bytes, list[tuple[bytes, bytes]]] | None]

#: seconds an idle keep-alive connection stays open (uvicorn's default)
KEEP_ALIVE_S = 5.0
#: seconds a closing TLS connection waits for the peer's close_notify
TLS_SHUTDOWN_TIMEOUT_S = 1.0
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_STATUS_LINES = {int(s): f"HTTP/1.1 {int(s)} {s.phrase}\r\n".encode("latin-1") for s in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_DISCONNECT = {"type": "http.disconnect"}
#: bodies below this size are joined to their header block; larger ones go out with writev
_COPY_LIMIT = 64 * 1024
#: the server's read buffer; request bodies of at least this size are read into their own
_READ_BUFFER_BYTES = 64 * 1024


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} \r\n".encode("latin-1")


class _Request:
    """One parsed request, complete with its body; ``scope`` is its ASGI scope when it was
    made (for the admission check) before the body was read."""

    __slots__ = ("body", "headers", "http_version", "keep_alive", "method", "scope", "url")

    def __init__(
        self,
        method: str,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes | memoryview,
        http_version: str,
        keep_alive: bool,
        scope: dict[str, Any] | None,
    ) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.http_version = http_version
        self.keep_alive = keep_alive
        self.scope = scope


class _Refusal:
    """An answer the server gives itself, then closes the connection: ``body`` is JSON."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or []


class _Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests and runs them one at a time, in order.

    Reads land in the server's read buffer, which the parser consumes before the next read of
    any connection (the buffer is shared: idle connections hold none). The body of a request
    with a large Content-Length gets a buffer of its size instead: once the parser has passed
    on the part that came with the header block, the rest is read from the socket straight
    into place (without this, uvloop's copy into a bytes object, the parser's copy of each
    piece and the join copied every body three times on the event loop). The parser, left
    expecting that body, is replaced by a new one for the next request.
    """

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._app = server.app
        self._loop = server.loop
        self._parser = httptools.HttpRequestParser(self)
        self._read_buffer = server.read_buffer
        self._transport: asyncio.Transport | None = None
        self._scope_base: dict[str, Any] = {}
        self._queue: deque[_Request | _Refusal] = deque()  # parsed, not yet answered
        self._busy = False  # a request is with the application
        self._closing = False  # answer what runs, then close
        self._reading = True
        self._disconnected: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused
        self.last_active = 0.0
        # the request being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._large_body: memoryview | None = None  # a large body's own buffer
        self._body_rest: memoryview | None = None  # its part still to read, past the parser
        self._scope: dict[str, Any] | None = None  # made early, for the admission check
        self._refused = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses
        server = self._server
        self._scope_base = {
            "type": "http",
            "asgi": _ASGI,
            "scheme": server.scheme,
            "server": _address(transport.get_extra_info("sockname")),
            "client": _address(transport.get_extra_info("peername")),
            "root_path": "",
        }
        self.last_active = self._loop.time()
        server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._queue.clear()
        if self._disconnected is not None and not self._disconnected.done():
            self._disconnected.set_result(None)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        # the rest of a large body, exactly: a pipelined request after it is the parser's
        rest = self._body_rest
        return self._read_buffer if rest is None else rest

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        rest = self._body_rest
        if rest is None:
            self._parse(self._read_buffer[:nbytes])
        elif nbytes < len(rest):
            self._body_rest = rest[nbytes:]
        else:
            self._body_rest = None
            assert self._large_body is not None
            self._complete(self._large_body)
            # the parser still awaits this body: the next request gets a new one
            self._parser = httptools.HttpRequestParser(self)
        self._next()

    def _parse(self, data: memoryview) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # no protocol upgrades (WebSocket, h2c): answer the request as plain HTTP/1.1
            self._closing = True
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}")
            return
        if self._large_body is not None:  # not complete yet: the rest is read into place
            self._body_rest = self._large_body[self._body_bytes :]

    def pause_writing(self) -> None:
        self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._header_bytes = 0
        self._body = []
        self._body_bytes = 0
        self._large_body = None
        self._scope = None
        self._refused = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        limit = self._server.max_header_bytes
        if limit and self._header_bytes > limit:
            if not self._refused:
                self._refuse(
                    431,
                    f"request headers are above the limit of {limit} bytes "
                    "(INFERPLEX_MAX_HEADER_BYTES)",
                )
            return
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        length = None
        expect_continue = chunked = False
        for name, value in self._headers:
            if name == b"content-length" and value.isdigit():
                length = int(value)
            elif name == b"expect" and value.lower() == b"100-continue":
                expect_continue = True
            elif name == b"transfer-encoding":
                chunked = True
        admit = self._server.admit
        if admit is not None and (length or chunked):
            # a request with a body is admitted (route, method, token) before any of the body
            # is read or buffered: a client that may not call the endpoint sends nothing more
            self._scope = self._make_scope(
                self._parser.get_method().decode("ascii"),
                self._url,
                self._headers,
                self._parser.get_http_version(),
            )
            refusal = admit(self._scope)
            if refusal is not None:
                self._refuse_with(_Refusal(*refusal))
                return
        if length is not None and length > self._server.max_body_bytes:
            self._refuse_body(f"Content-Length {length}")
            return
        if (
            length is not None
            and length >= _READ_BUFFER_BYTES
            and not self._parser.should_upgrade()
        ):
            self._large_body = uninitialised(length)
        if expect_continue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        start = self._body_bytes
        self._body_bytes += len(body)
        if self._large_body is not None:  # its size was checked against the limit
            self._large_body[start : self._body_bytes] = body
            return
        if self._body_bytes > self._server.max_body_bytes:
            self._refuse_body(f"at least {self._body_bytes} bytes")
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        if self._large_body is not None:
            self._complete(self._large_body)
        else:
            body = self._body
            self._complete(body[0] if len(body) == 1 else b"".join(body))

    def _complete(self, body: bytes | memoryview) -> None:
        """The request being parsed is complete, with ``body``."""
        parser = self._parser
        self._large_body = None
        self._queue.append(
            _Request(
                parser.get_method().decode("ascii"),
                self._url,
                self._headers,
                body,
                parser.get_http_version(),
                parser.should_keep_alive(),
                self._scope,
            )
        )
        self._scope = None

    # -- refusals -------------------------------------------------------------------------
    def _refuse_body(self, size: str) -> None:
        self._refuse(
            413,
            f"request body of {size} is above the limit of {self._server.max_body_bytes} "
            "bytes (INFERPLEX_MAX_REQUEST_BYTES)",
        )

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` after the requests before it, then close; read nothing more."""
        self._refuse_with(_Refusal(status, orjson.dumps({"error": message})))

    def _refuse_with(self, refusal: _Refusal) -> None:
        self._refused = True
        self._queue.append(refusal)
        self._stop_reading()

    def _stop_reading(self) -> None:
        if self._reading and self._transport is not None:
            self._reading = False
            self._transport.pause_reading()

    # -- running requests -----------------------------------------------------------------
    def _next(self) -> None:
        """Start the next parsed request unless one runs."""
        if self._busy or not self._queue or self._transport is None:
            return
        item = self._queue.popleft()
        if isinstance(item, _Refusal):
            head = [_status_line(item.status)]
            head.extend(
                b"%s: %s\r\n" % (name, value)
                for name, value in item.headers
                if name not in (b"content-type", b"content-length", b"connection")
            )
            self._transport.write(
                b"".join(head)
                + b"content-type: application/json\r\nconnection: close\r\n"
                + b"content-length: %d\r\n\r\n" % len(item.body)
                + item.body
            )
            self._transport.close()
            return
        self._busy = True
        if len(self._queue) > 8:
            self._stop_reading()  # a client pipelining far ahead waits for its answers
        scope = item.scope
        if scope is None:
            scope = self._make_scope(item.method, item.url, item.headers, item.http_version)
        cycle = _Cycle(self, item)
        task = self._loop.create_task(self._app(scope, cycle.receive, cycle.send))
        task.add_done_callback(cycle.finished)

    def _make_scope(
        self, method: str, url: bytes, headers: list[tuple[bytes, bytes]], http_version: str
    ) -> dict[str, Any]:
        path, _, query = url.partition(b"?")
        scope = dict(self._scope_base)
        scope["http_version"] = http_version
        scope["method"] = method
        scope["path"] = unquote(path.decode("latin-1")) if b"%" in path else path.decode("latin-1")
        scope["raw_path"] = path
        scope["query_string"] = query
        scope["headers"] = headers
        return scope

    def answered(self, keep_alive: bool) -> None:
        """The running request's response is complete."""
        self._busy = False
        transport = self._transport
        if transport is None:
            return
        if not keep_alive or (self._closing and not self._queue) or self._server.stopping:
            transport.close()
            return
        if not self._reading and not self._refused and len(self._queue) <= 8:
            self._reading = True
            transport.resume_reading()
        self._next()

    def disconnected(self) -> asyncio.Future[None]:
        if self._disconnected is None:
            self._disconnected = self._loop.create_future()
            if self._transport is None:
                self._disconnected.set_result(None)
        return self._disconnected

    def write(self, head: bytes, body: bytes) -> asyncio.Future[None] | None:
        """Write a response's header block (may be empty) and body in one go; a future to
        await when the transport asked us to pause."""
        transport = self._transport
        if transport is not None:
            if len(body) < _COPY_LIMIT:
                transport.write(head + body)  # one small copy beats a list and a writev
            else:
                transport.writelines((head, body))
        return self._drained

    @property
    def idle(self) -> bool:
        return not self._busy and not self._queue

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class _Cycle:
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

    def __init__(self, connection: _Connection, request: _Request) -> None:
        self._connection = connection
        self._request: _Request | None = request
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
        lines = [_status_line(self._status)]
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
        if not self._keep_alive or self._connection._server.stopping:
            self._keep_alive = False
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def finished(self, task: asyncio.Task[None]) -> None:
        """The application returned: a request it left unanswered gets a 500 (or, when it
        had started a response, the connection is closed)."""
        if task.cancelled():
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
        body = orjson.dumps({"error": "internal server error: the request got no response"})
        connection.write(
            _status_line(500)
            + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body),
            body,
        )
        connection.answered(self._keep_alive)


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None


class HttpServer:
    """Serves one ASGI ``app`` on one listening socket."""

    def __init__(
        self,
        app: App,
        *,
        max_body_bytes: int,
        max_header_bytes: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        keep_alive_s: float = KEEP_ALIVE_S,
        admit: Admit | None = None,
    ) -> None:
        """``admit`` checks each request with a body before the body is read."""
        self.app = app
        self.admit = admit
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.scheme = "https" if ssl_context is not None else "http"
        self.connections: set[_Connection] = set()
        #: where every connection reads, one at a time: the event loop runs one read and its
        #: parse before the next
        self.read_buffer = memoryview(bytearray(_READ_BUFFER_BYTES))
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start
        self._ssl = ssl_context
        self._keep_alive_s = keep_alive_s
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: Any) -> None:
        """Serve on ``sock`` (bound; ``frontends.sockets.bind``); returns once it accepts
        connections."""
        self.loop = asyncio.get_running_loop()
        options: dict[str, Any] = {}
        if self._ssl is not None:
            options = {"ssl": self._ssl, "ssl_shutdown_timeout": TLS_SHUTDOWN_TIMEOUT_S}
        self._server = await self.loop.create_server(
            lambda: _Connection(self), sock=sock, backlog=2048, **options
        )
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    @property
    def _sweep_every(self) -> float:
        return min(1.0, self._keep_alive_s / 2)

    def _sweep(self) -> None:
        """Close keep-alive connections idle for longer than the keep-alive time."""
        expired = self.loop.time() - self._keep_alive_s
        for connection in list(self.connections):
            if connection.idle and connection.last_active < expired:
                connection.close()
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    async def stop(self, grace: float) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds), close."""
        self.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            if connection.idle:
                connection.close()
        deadline = self.loop.time() + grace
        while any(not c.idle for c in self.connections) and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.close()
        # A TLS connection's close waits for the peer's close_notify; a peer that never sends
        # it must hold neither this stop nor the event loop's close: abort what is left.
        deadline = self.loop.time() + TLS_SHUTDOWN_TIMEOUT_S
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        for connection in list(self.connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
