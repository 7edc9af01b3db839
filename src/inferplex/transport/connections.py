"""Connections as a budgeted resource: every listener of the process (HTTP, management,
metrics, gRPC) accepts through one ``ConnectionGate``, which counts open connections
server-wide and per peer (client address) from the moment they are accepted, TLS handshake
included, until they close.

Why our own accept loop (``Listener``) instead of ``loop.create_server``: a connection must be
counted before it can hold anything. asyncio calls a protocol's ``connection_made`` only
after a TLS handshake, so a cap there would leave handshaking connections uncounted (each an
open descriptor for up to the handshake timeout). Here a connection over a cap is closed right
after ``accept``, before any buffer or protocol exists for it (an HTTP/1.1 or h2c client first
gets a short answer naming the limit); the others go to ``loop.connect_accepted_socket`` with
the listener's TLS handshake timeout. The cost is one task per accepted connection, nothing
per request.

Defaults (docs/security.md, "Connections"): the server-wide cap is derived from the
descriptor limit (``RLIMIT_NOFILE``), less a reserve for what else the process opens: model
files while they load, worker processes' pipes, shared-memory regions, outbound connections
of remote models and mesh peers, the listeners, logs and the event loop's own descriptors. The
per-peer cap is half of it: one address can never take every slot, so other clients keep
room, and a few hundred concurrent clients from one host (perf_analyzer's
``--concurrency-range``, the test suite, all from 127.0.0.1) stay far below it.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import resource
import socket
import ssl
from collections.abc import Callable
from typing import Any

import orjson

from inferplex.transport.http2_wire import ENHANCE_YOUR_CALM, GOAWAY, SETTINGS, U32, frame

__all__ = [
    "REASONS",
    "ConnectionGate",
    "Listener",
    "connection_caps",
    "http1_refusal",
    "http2_refusal",
    "peer_key",
]

logger = logging.getLogger(__name__)

#: why a connection was refused (the ``reason`` label of ``inferplex_connections_refused``)
REASONS = ("server", "peer")
#: descriptors kept out of the automatic cap: at least this many, and at least this share
RESERVE_MIN = 256
RESERVE_SHARE = 4  # a quarter
#: the automatic cap's ceiling, whatever the descriptor limit: each open connection costs a
#: few KiB of protocol state, so a limit of millions must not mean millions of connections
AUTO_CAP_MAX = 65536
#: seconds a listener stops accepting after the process ran out of descriptors (asyncio's)
_ACCEPT_RETRY_S = 1.0
_BACKLOG = 2048
#: connections taken from the kernel's queue per turn of the event loop: a flood of
#: connects is served in bounded slices, other clients' requests in between
_ACCEPTS_PER_TURN = 64


def connection_caps(max_connections: int, max_per_peer: int) -> tuple[int, int]:
    """The caps to enforce: ``max_connections`` (0: from the descriptor limit, see the
    module's docstring) and ``max_per_peer`` (0: half the server-wide cap; -1: none)."""
    if max_connections <= 0:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = AUTO_CAP_MAX * 2
        reserve = max(RESERVE_MIN, soft // RESERVE_SHARE)
        max_connections = max(16, min(soft - reserve, AUTO_CAP_MAX))
    if max_per_peer == 0:
        max_per_peer = max(1, max_connections // 2)
    elif max_per_peer < 0:
        max_per_peer = 0
    return max_connections, max_per_peer


def peer_key(address: Any) -> str:
    """Who a peer is, for the per-peer cap: its IPv4 address, or its IPv6 /64 (one host
    usually holds a whole /64); an IPv4-mapped IPv6 address is its IPv4 address."""
    host = address[0] if isinstance(address, tuple) and address else str(address)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class ConnectionGate:
    """Open connections of the whole process, server-wide and by peer. ``refused`` counts
    the connections closed at accept, by reason (metrics read it)."""

    __slots__ = ("by_peer", "max_connections", "max_per_peer", "open", "refused")

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        """``max_connections``, ``max_per_peer``: 0 = no cap."""
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.open = 0
        self.by_peer: dict[str, int] = {}
        self.refused: dict[str, int] = dict.fromkeys(REASONS, 0)

    def admit(self, peer: str) -> str | None:
        """Count a new connection of ``peer``; or the reason it is refused (not counted)."""
        if self.max_connections and self.open >= self.max_connections:
            reason = "server"
        elif self.max_per_peer and self.by_peer.get(peer, 0) >= self.max_per_peer:
            reason = "peer"
        else:
            self.open += 1
            self.by_peer[peer] = self.by_peer.get(peer, 0) + 1
            return None
        self.refused[reason] += 1
        return reason

    def release(self, peer: str) -> None:
        """A connection ``admit`` counted has closed."""
        self.open -= 1
        left = self.by_peer[peer] - 1
        if left:
            self.by_peer[peer] = left
        else:
            del self.by_peer[peer]

    def message(self, reason: str) -> str:
        """What a refused client is told."""
        if reason == "server":
            return (
                f"the server has {self.max_connections} connections open, its limit "
                "(INFERPLEX_MAX_CONNECTIONS): retry later"
            )
        return (
            f"this address has {self.max_per_peer} connections open, the limit per client "
            "(INFERPLEX_MAX_CONNECTIONS_PER_PEER): close some first"
        )


#: what a refused client is sent before the close: (gate, reason) -> bytes
Refusal = Callable[[ConnectionGate, str], bytes]


class Listener:
    """Accepts connections on a bound socket for ``factory``'s protocol, through ``gate``.

    ``ssl_context``: TLS, with ``handshake_timeout_s`` for the handshake (the connection is
    closed when it runs out); ``refusal``: the bytes sent to a refused plain-text client
    (none for TLS: it has not negotiated anything to read them with).
    """

    def __init__(
        self,
        gate: ConnectionGate,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout_s: float = 60.0,
        shutdown_timeout_s: float = 1.0,
        refusal: Refusal | None = None,
    ) -> None:
        self._gate = gate
        self._sock = sock
        self._factory = factory
        self._tls: dict[str, Any] = {}
        if ssl_context is not None:
            self._tls = {
                "ssl": ssl_context,
                "ssl_handshake_timeout": handshake_timeout_s,
                "ssl_shutdown_timeout": shutdown_timeout_s,
            }
        self._refusal = None if ssl_context is not None else refusal
        self._loop: asyncio.AbstractEventLoop | None = None
        self._accepting = False
        self._retry: asyncio.TimerHandle | None = None
        self._connecting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Listen and accept (the socket is bound and non-blocking: ``sockets.bind``)."""
        self._loop = asyncio.get_running_loop()
        self._sock.listen(_BACKLOG)
        self._resume()

    def _resume(self) -> None:
        self._retry = None
        if self._loop is not None and not self._accepting and self._sock.fileno() >= 0:
            self._loop.add_reader(self._sock.fileno(), self._accept)
            self._accepting = True

    def _pause(self) -> None:
        if self._accepting and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._accepting = False

    def _accept(self) -> None:
        """Take what the kernel has queued, a slice per turn of the loop."""
        gate = self._gate
        for _ in range(_ACCEPTS_PER_TURN):
            try:
                conn, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # out of descriptors or memory: stop accepting a while, as asyncio does
                    logger.warning("accept failed (%s): pausing for %g s", exc, _ACCEPT_RETRY_S)
                    self._pause()
                    assert self._loop is not None
                    self._retry = self._loop.call_later(_ACCEPT_RETRY_S, self._resume)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client left before we took it
                raise
            peer = peer_key(address)
            reason = gate.admit(peer)
            if reason is not None:
                self._refuse(conn, reason)
                continue
            conn.setblocking(False)
            if conn.family != socket.AF_UNIX:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            assert self._loop is not None
            task = self._loop.create_task(self._connect(conn, peer))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        """Close ``conn`` at once, after the listener's short answer when it has one (a
        send that does not fit the socket's buffer is dropped: nothing is ever queued)."""
        try:
            if self._refusal is not None:
                conn.setblocking(False)
                conn.send(self._refusal(self._gate, reason))
        except OSError:
            pass
        finally:
            conn.close()

    async def _connect(self, conn: socket.socket, peer: str) -> None:
        assert self._loop is not None
        gate = self._gate
        released = False

        def release() -> None:  # once, whichever way the connection ends
            nonlocal released
            if not released:
                released = True
                gate.release(peer)

        def counted() -> asyncio.BaseProtocol:
            protocol = self._factory()
            _count_until_lost(protocol, release)
            return protocol

        try:
            await self._loop.connect_accepted_socket(counted, conn, **self._tls)
        except (Exception, asyncio.CancelledError) as exc:
            # a TLS handshake that failed or ran out of time (or the listener closed): its
            # protocol never saw the connection
            logger.debug("connection from %s dropped before it was served: %r", peer, exc)
            release()
            conn.close()

    def close(self) -> None:
        """Stop accepting and close the listening socket; TLS handshakes under way are
        dropped. A plain connection being set up is left to finish (within a loop turn):
        cancelled midway, uvloop closed its transport without telling its protocol, which
        then held a graceful stop for its whole grace."""
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._sock.close()
        if self._tls:
            for task in list(self._connecting):
                task.cancel()


def _count_until_lost(protocol: Any, release: Callable[[], None]) -> None:
    """Call ``release`` once ``protocol``'s connection is lost. The protocol's own
    ``connection_lost`` is wrapped on the instance, so that every protocol served here (the
    built-in HTTP/1.1 and HTTP/2 ones, uvicorn's) is counted without a hook of its own."""
    lost = protocol.connection_lost

    def connection_lost(exc: Exception | None) -> None:
        release()
        lost(exc)

    protocol.connection_lost = connection_lost


def http1_refusal(gate: ConnectionGate, reason: str) -> bytes:
    """An HTTP/1.1 client over a cap: 503 naming the limit, then the close."""
    body = orjson.dumps({"error": gate.message(reason)})
    head = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    return head + body


def http2_refusal(gate: ConnectionGate, reason: str) -> bytes:
    """An HTTP/2 (h2c) client over a cap: our SETTINGS and GOAWAY ENHANCE_YOUR_CALM naming
    the limit (gRPC clients report it as UNAVAILABLE with that message), then the close."""
    goaway = U32.pack(0) + U32.pack(ENHANCE_YOUR_CALM) + gate.message(reason).encode()
    return frame(SETTINGS, 0, 0, b"") + frame(GOAWAY, 0, 0, goaway)
