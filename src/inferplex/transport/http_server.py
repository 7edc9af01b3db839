"""A small HTTP/1.1 server for ASGI applications: asyncio protocol + httptools, one socket
write per response. An application may also be called the native way (``respond``: the
whole request in, ``(status, body, headers)`` out), as the V2 app is when tracing is off:
no scope dict, no receive/send messages, no cycle object per request.

Why not uvicorn (DESIGN.md's first choice): per request, uvicorn builds its scope, a
RequestResponseCycle, a flow-control object and a keep-alive timer, and runs the application
through receive/send coroutines that pass through several layers; on a 2-core machine that
was about half of the server's CPU per inference request. This server keeps what our
applications use of ASGI 3 (``http`` scopes, one complete request body, a response start and
body) and does the rest once per connection: bodies are collected by the parser (limits are
enforced as they arrive; a large body is read from the socket straight into its own buffer,
see ``http_connection.Connection``), the response's header block and body leave in one
``write``, the clocks (keep-alive, header, body and send timeouts) are one sweep a second (at
most) for all connections, and shutdown drains in-flight requests. ``bench/http_server.py``
measures it against uvicorn side by side.

Kept from HTTP/1.1: keep-alive and ``Connection: close``, HTTP/1.0, pipelined requests
(answered in order), chunked request bodies, ``Expect: 100-continue``, ``HEAD``, streamed
responses (``more_body``, sent chunked), back-pressure (a paused transport pauses ``send``).

What one client can make the server hold is bounded (``http_limits.py``; docs/security.md
lists each bound with its flag): the request line and header block, counted as their bytes
arrive (414/431), the time to a complete header block (408), a body's rate (408), the bytes a
connection buffers beyond the request its application runs (reading pauses), the bytes all
connections buffer (503), the time between requests (closed) and the time a response may
wait on a client that does not read (aborted). Refused at the protocol level, each with
``{"error": ...}``, ``Connection: close`` and a count in ``HttpServer.refusals``: a malformed
request (400), an HTTP/1.1 request without one ``Host`` (400), HTTP versions other than 1.0
and 1.1 and the HTTP/2 preface (505), a body above the limit (413).
"""

from __future__ import annotations

import asyncio
from typing import Any

from inferplex.transport.connections import ConnectionGate, Listener, http1_refusal
from inferplex.transport.http_connection import READ_BUFFER_BYTES, Connection
from inferplex.transport.http_limits import REASONS, ByteBudget, Http1Limits
from inferplex.transport.interface import AsgiApp, NativeApp
from inferplex.transport.listener import ListenerSpec

__all__ = ["ByteBudget", "Http1Limits", "HttpServer"]


#: seconds a closing TLS connection waits for the peer's close_notify
TLS_SHUTDOWN_TIMEOUT_S = 1.0


class HttpServer:
    """Serves one native ``app`` (``interface.NativeApp``) on one listening socket.

    ``refusals`` counts the requests the server answered itself, by reason
    (``http_limits.REASONS``), and ``send_timeouts`` the connections dropped for not reading
    their answers; metrics/collector.py reads both.
    """

    def __init__(
        self,
        app: NativeApp | None,
        spec: ListenerSpec | None = None,
        *,
        asgi: AsgiApp | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:
        """``spec``: the body and header limits, ``spec.http1``'s clocks and buffers, TLS
        (default: ListenerSpec()'s); ``app.refusal`` admits each request with a body before
        the body is read, ``app.respond`` answers; ``asgi``, an ASGI middleware around the
        app (tracing; or, with no ``app``, an ASGI app of its own), answers instead;
        ``budget`` and ``gate`` (connections) are shared by the listeners of one process
        (default: this server's own, unlimited)."""
        if app is None and asgi is None:
            raise ValueError("HttpServer needs an app to serve")
        spec = spec if spec is not None else ListenerSpec()
        self.app = asgi
        self.admit = app.refusal if app is not None else None
        #: the app called natively (no ASGI middleware around it)
        self.native = app if asgi is None else None
        self.max_body_bytes = spec.max_body_bytes
        self.max_header_bytes = spec.max_header_bytes
        self.limits: Http1Limits = spec.http1
        self.budget = budget if budget is not None else ByteBudget(0)
        self.gate = gate if gate is not None else ConnectionGate(0, 0)
        self.refusals: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.send_timeouts = 0
        ssl_context = spec.tls.https_context() if spec.tls is not None else None
        self.scheme = "https" if ssl_context is not None else "http"
        self.connections: set[Connection] = set()
        #: where every connection reads, one at a time: the event loop runs one read and its
        #: parse before the next
        self.read_buffer = memoryview(bytearray(READ_BUFFER_BYTES))
        self.stopping = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start
        self._ssl = ssl_context
        self._listener: Listener | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: Any) -> None:
        """Serve on ``sock`` (bound; ``transport.sockets.bind``); returns once it accepts
        connections."""
        self.loop = asyncio.get_running_loop()
        self._listener = Listener(
            self.gate,
            sock,
            lambda: Connection(self),
            ssl_context=self._ssl,
            # a handshake is part of the wait for a first request's header block
            handshake_timeout_s=self.limits.header_timeout_s,
            shutdown_timeout_s=TLS_SHUTDOWN_TIMEOUT_S,
            refusal=http1_refusal,
        )
        self._listener.start()
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    @property
    def _sweep_every(self) -> float:
        limits = self.limits
        shortest = min(
            limits.keep_alive_s,
            limits.header_timeout_s,
            limits.body_timeout_s,
            limits.send_timeout_s,
        )
        return min(1.0, shortest / 2)

    def _sweep(self) -> None:
        """Apply every connection's clocks: idle, header, body and send timeouts."""
        self.sweep(self.loop.time())
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    def sweep(self, now: float) -> None:
        """One pass of the clocks at ``now`` (the fuzz test calls it with a time ahead)."""
        for connection in list(self.connections):
            connection.expire(now)

    async def stop(self, grace: float) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace`` seconds), close."""
        self.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._listener is not None:
            self._listener.close()
        for connection in list(self.connections):
            if connection.idle:
                connection.close()
        deadline = self.loop.time() + grace
        while (
            any(not c.idle and not c.closing for c in self.connections)
            and self.loop.time() < deadline
        ):
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
