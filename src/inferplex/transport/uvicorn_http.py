"""The reference HTTP/1.1 server: uvicorn (uvloop, httptools) serving an ASGI app on a socket
the composition root has already bound (``--http-server uvicorn``).

It stands beside the built-in server (``transport/http_server.py``) with the same
``start(sock)`` / ``stop(grace)`` and the counters the metrics read, so that the same tests
run against both and a difference in behaviour is a failing test (DESIGN.md, "The edge").

What our config sets in uvicorn: keep-alive (``http_keep_alive_s``), the header limit of its
h11 protocol (``h11_max_incomplete_event_size``; httptools, used here, has none), its
``limit_concurrency`` (one past the connection cap: a backstop), TLS from the same SSLContext the
built-in server gets, and the graceful shutdown (``stop(grace)``: open requests get
``grace`` seconds, whole seconds as uvicorn counts them). Lifespan, access log, proxy
headers and websockets are off.

Connections are accepted as the built-in server's are (transport/connections.py): through
the process's ``ConnectionGate`` (server-wide and per-peer caps, counted from the accept),
with the TLS handshake bounded by ``http_header_timeout_s``; uvicorn's own listener is not
used (uvicorn's ``startup`` gets no socket). Its protocol is given two clocks it lacks
(:class:`_Clocked`): a connection must send its first byte within ``http_keep_alive_s``
(uvicorn arms its keep-alive only after an answer, so a connection that never sends a
request was kept forever) and a header block must be complete within
``http_header_timeout_s`` of its first byte (slowloris).

A native app is served through the one ASGI adapter (transport/asgi.py): it admits a
request with a body when uvicorn calls it, on a complete header block, before any of the
body is asked for, and reads the body up to the most its endpoint takes.

A thin ASGI wrapper (:class:`_Edge`) keeps three of the built-in server's answers that
uvicorn does not give, so the twins answer alike:

- an HTTP/1.1 request without exactly one ``Host`` (an HTTP/1.0 one with two) gets 400
  (RFC 9112 3.2; uvicorn would serve it);
- a header block above ``max_header_bytes`` gets 414 / 431 (counted once the block is whole:
  uvicorn's httptools protocol does not bound it as it arrives, as the built-in server does);
- an answer sent before the request's body was read whole (a refused token, a 413) closes the
  connection, as the built-in server does; uvicorn would read and drop the rest of the body
  to keep the connection;
- a ``Transfer-Encoding`` other than ``chunked`` (``gzip, chunked``) gets 501 (RFC 9112 6.1):
  httptools reads such a body's chunks and uvicorn hands the app the still-coded bytes.

The server-wide byte budget (``--max-buffered-bytes``) is kept here too: a request's body is
charged as the app receives it, until the app returns (its answer handed to uvicorn), and a
body that does not fit gets 503 with ``Retry-After``, before it is read when its
Content-Length says so.

Not enforced here, unlike the built-in server (uvicorn has no such settings): the body-rate
and send timeouts, and answers waiting for a client that does not read (uvicorn pauses the
app's ``send`` past its write buffer's high-water mark, uncharged). Each connection's
buffered body is bounded by uvicorn's own flow control (reading pauses past 64 KiB).
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sized
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from inferplex.transport.asgi import AsgiAdapter
from inferplex.transport.connections import ConnectionGate, Listener, http1_refusal
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.interface import NativeApp
from inferplex.transport.listener import ListenerSpec

__all__ = ["UvicornHttpServer"]

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class _Edge:
    """The ASGI app as the built-in server would present it (see the module's docstring)."""

    def __init__(
        self,
        app: App,
        max_header_bytes: int,
        refusals: dict[str, int],
        budget: ByteBudget | None = None,
    ) -> None:
        self._app = app
        self._max_header_bytes = max_header_bytes
        self._refusals = refusals
        self._budget = budget if budget is not None else ByteBudget(0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        limit = self._max_header_bytes
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        if limit and size > limit:
            await self._refuse(send, "uri_too_long", 414, "the request line is above the limit")
            return
        fields_size, has_body, length, coding, hosts = _header_fields(scope["headers"])
        if limit and size + fields_size > limit:
            await self._refuse(send, "header_too_large", 431, "request headers are above the limit")
            return
        if hosts != 1 and (hosts or scope.get("http_version") != "1.0"):
            # RFC 9112 3.2: an HTTP/1.1 request names its host once, and no request twice
            await self._answer(send, "missing_host", 400, f"{hosts} Host headers: send exactly one")
            return
        if coding is not None:
            message = (
                f"Transfer-Encoding '{coding.decode('latin-1')}' is not implemented: send the "
                "body chunked or with Content-Length (Content-Encoding: gzip compresses it)"
            )
            await self._answer(send, "transfer_coding", 501, message)
            return
        if not has_body:
            await self._app(scope, receive, send)
            return
        budget = self._budget
        if 0 < budget.limit < budget.used + length:
            await self._refuse_buffer_full(send)
            return
        charged = _Charged(receive, send, budget)
        try:
            await self._app(scope, charged.receive, charged.send)
            if charged.full and not charged.started:
                await self._refuse_buffer_full(send)
        finally:
            charged.release()

    async def _refuse(self, send: Send, reason: str, status: int, what: str) -> None:
        message = f"{what} of {self._max_header_bytes} bytes (INFERPLEX_MAX_HEADER_BYTES)"
        await self._answer(send, reason, status, message)

    async def _refuse_buffer_full(self, send: Send) -> None:
        message = (
            "the server holds too many request bytes to read this body now "
            "(INFERPLEX_MAX_BUFFERED_BYTES): retry later"
        )
        await self._answer(send, "server_buffer_full", 503, message, [(b"retry-after", b"1")])

    async def _answer(
        self,
        send: Send,
        reason: str,
        status: int,
        message: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self._refusals[reason] = self._refusals.get(reason, 0) + 1
        body = orjson.dumps({"error": message})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *(extra or ()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Charged:
    """``receive`` and ``send`` of a request with a body, its bytes charged to the budget
    as they arrive (until ``release``); one that would pass it reads as a disconnect to the
    app, whatever the app answers then is dropped, and the edge answers 503. A response that starts
    before the body was read whole closes the connection (see the module's docstring)."""

    __slots__ = ("_budget", "_receive", "_send", "body_read", "full", "held", "started")

    def __init__(self, receive: Receive, send: Send, budget: ByteBudget) -> None:
        self._receive = receive
        self._send = send
        self._budget = budget
        self.held = 0
        self.body_read = False
        self.full = False
        self.started = False

    async def receive(self) -> Message:
        if self.full:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request":
            return message
        if not message.get("more_body", False):
            self.body_read = True
        count = len(message.get("body", b""))
        budget = self._budget
        if 0 < budget.limit < budget.used + count:
            self.full = True
            return {"type": "http.disconnect"}
        budget.used += count
        self.held += count
        return message

    async def send(self, message: Message) -> None:
        if self.full and not self.started:
            return  # the edge answers 503 instead
        if message["type"] == "http.response.start":
            self.started = True
            if not self.body_read:
                # the rest of the body is not read: the connection cannot carry another
                headers = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
        await self._send(message)

    def release(self) -> None:
        held = self.held
        if held:
            self.held = 0
            self._budget.used -= held
            self._budget.freed(held)


def _header_fields(
    headers: Iterable[tuple[bytes, bytes]],
) -> tuple[int, bool, int, bytes | None, int]:
    """The bytes of a request's header fields as the built-in server counts them, whether
    the request has a body, its Content-Length (0 if none), a transfer coding besides
    ``chunked`` if it names one, and how many ``Host`` fields it has."""
    size = hosts = 0
    has_body = chunked = False
    length = 0
    coding = None
    for name, value in headers:
        size += len(name) + len(value) + 4  # the separator and the line end, as the built-in
        if name == b"content-length":
            has_body = has_body or value != b"0"
            if value.isdigit():
                length = int(value)
        elif name == b"transfer-encoding":
            if chunked or value.strip().lower() != b"chunked":
                coding = value  # a coding besides chunked, or chunked twice
            has_body = chunked = True
        elif name == b"host":
            hosts += 1
    return size, has_body, length, coding, hosts


class _Clocked(HttpToolsProtocol):
    """uvicorn's httptools protocol with the clocks it lacks: the first byte within
    ``first_byte_s`` of the connection, each header block within ``header_s`` of its
    first byte; past either the connection is closed."""

    first_byte_s = 5.0
    header_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._clock: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm(self.first_byte_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.header_s)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._clock = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            self._clock = None

    def _expired(self) -> None:
        self._clock = None
        if not self.transport.is_closing():
            self.transport.close()


class UvicornHttpServer:
    """Serves one ASGI ``app`` on one bound socket with uvicorn.

    ``refusals`` counts the requests answered without the application, by reason (the
    built-in server's reasons); ``send_timeouts`` stays 0 (uvicorn has no send timeout).
    """

    def __init__(
        self,
        app: NativeApp | None,
        spec: ListenerSpec | None = None,
        *,
        asgi: App | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:
        """``app``, served through the ASGI adapter (transport/asgi.py), or ``asgi``, an
        ASGI middleware around it (tracing; or an ASGI app of its own); ``spec``: the header
        and body limits, keep-alive and header timeout (``spec.http1``) and TLS this server
        has settings for (default: ListenerSpec()'s); ``budget`` bounds request bytes held
        server-wide (shared with the other listeners; default: none); ``gate``: the
        connections of the process's listeners (default: none of its own)."""
        spec = spec if spec is not None else ListenerSpec()
        if asgi is None:
            if app is None:
                raise ValueError("UvicornHttpServer needs an app to serve")
            asgi = AsgiAdapter(app, spec.max_body_bytes)
        max_header_bytes = spec.max_header_bytes
        self.refusals: dict[str, int] = {}
        self.send_timeouts = 0
        self.budget = budget if budget is not None else ByteBudget(0)
        self.gate = gate if gate is not None else ConnectionGate(0, 0)
        self._header_timeout_s = spec.http1.header_timeout_s
        self._listener: Listener | None = None
        self._edge = _Edge(asgi, max_header_bytes, self.refusals, self.budget)
        self._max_header_bytes = max_header_bytes
        # the built-in server's context: same files, same client CA
        self._ssl = spec.tls.https_context() if spec.tls is not None else None
        self._keep_alive_s = spec.http1.keep_alive_s
        self._server: uvicorn.Server | None = None
        self._ticking: asyncio.Task[None] | None = None

    @property
    def connections(self) -> Sized:
        """The open connections."""
        return self._server.server_state.connections if self._server is not None else ()

    async def start(self, sock: socket.socket) -> None:
        """Serve on ``sock`` (bound; ``transport.sockets.bind``); returns once it accepts
        connections."""
        config = uvicorn.Config(
            self._edge,
            loop="none",  # the caller's loop (uvloop: server.py runs on one)
            http="httptools",
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,  # the process's logging stays ours
            access_log=False,
            proxy_headers=False,  # the client address is the peer's, as with the built-in
            server_header=False,
            # uvicorn's hint says int; it hands the value to call_later
            timeout_keep_alive=self._keep_alive_s,  # type: ignore[arg-type]
            h11_max_incomplete_event_size=self._max_header_bytes or None,
            # uvicorn answers 503 once its connections or tasks reach it: one past the cap, a
            # backstop that never refuses a connection the gate let in
            limit_concurrency=self.gate.max_connections + 1 if self.gate.max_connections else None,
        )
        config.load()
        config.ssl = self._ssl
        server = uvicorn.Server(config)
        # what Server.serve() does besides installing signal handlers, which are the
        # composition root's; no socket: the gate's listener accepts for uvicorn's protocol
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[])
        self._server = server
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            made = _Clocked(
                config=config,
                server_state=server.server_state,
                app_state=server.lifespan.state,
                _loop=loop,
            )
            made.first_byte_s = self._keep_alive_s
            made.header_s = self._header_timeout_s
            return made

        self._listener = Listener(
            self.gate,
            sock,
            protocol,
            ssl_context=self._ssl,
            handshake_timeout_s=self._header_timeout_s,
            refusal=http1_refusal,
        )
        self._listener.start()
        # uvicorn's tick: the Date header once a second, and the exit flag stop() sets
        self._ticking = loop.create_task(server.main_loop())

    async def stop(self, grace: float) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds), close."""
        server = self._server
        if server is None:
            return
        self._server = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        server.should_exit = True
        if self._ticking is not None:
            await self._ticking
            self._ticking = None
        server.config.timeout_graceful_shutdown = math.ceil(grace)
        # closes the listening socket, idle connections at once and busy ones after their
        # answer; past the grace the running requests are cancelled
        await server.shutdown()
        for connection in list(server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()  # one that still waits (e.g. for a TLS close_notify)
