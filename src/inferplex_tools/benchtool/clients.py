"""Cheap inference clients for the load loops: on a 2-core machine the client competes with
the server for CPU, so each request is pre-encoded bytes and each answer stays bytes.

- HTTP: one raw keep-alive HTTP/1.1 connection per lane (a bare asyncio protocol, about half
  the CPU of asyncio streams), responses framed by ``Content-Length``.
- gRPC: one ``grpc.aio`` channel shared by every lane, ``ModelInfer`` with no serialisers.

:class:`InferClient` is what the load loops see: ``lane()`` gives a closed-loop client its own
connection; ``call`` serves an open loop (HTTP: a pool that opens a connection per request in
flight). Any answer but 200 / OK raises :class:`RequestFailed`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, cast

from inferplex_tools.benchtool import BenchError
from inferplex_tools.benchtool.payloads import header_value

#: one request: returns the raw answer (HTTP: head and body joined by the caller's decoder)
Send = Callable[[], Awaitable[Any]]


class RequestFailed(BenchError):
    """The server answered an inference request with an error."""


class ConnectionClosed(RequestFailed, ConnectionError):
    """The connection ended before the answer came (a client may resend on a new one)."""


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection sending pre-encoded requests."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._head_size = 0  # 0 while the response head is incomplete
        self._total = 0
        self._waiter: asyncio.Future[tuple[bytes, bytes]] | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        _, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but behave as one.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        if not self._head_size:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            self._head_size = end + 4
            length = header_value(bytes(buffer[:end]), b"content-length")
            self._total = self._head_size + int(length or 0)
        if len(buffer) >= self._total and self._waiter is not None:
            head = bytes(buffer[: self._head_size])
            body = bytes(buffer[self._head_size : self._total])
            del buffer[: self._total]
            self._head_size = 0
            self._waiter.set_result((head, body))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(
                ConnectionClosed(f"the server closed the connection ({exc})")
            )

    @property
    def is_open(self) -> bool:
        """False once either side closed the connection (servers close idle ones)."""
        return self._transport is not None and not self._transport.is_closing()

    async def send(self, request: bytes) -> tuple[bytes, bytes]:
        """Send one request; returns the response head and body (RequestFailed unless 200)."""
        if self._transport is None:
            raise ConnectionClosed("not connected")
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        head, body = await self._waiter
        if not head.startswith(b"HTTP/1.1 200"):
            status = head.split(b"\r\n", 1)[0].decode(errors="replace")
            raise RequestFailed(f"{status}: {body[:300].decode(errors='replace')}")
        return head, body

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class InferClient(ABC):
    """Sends one pre-encoded inference request of one model, over and over."""

    @abstractmethod
    async def lane(self) -> Send:
        """A sender with its own connection, for one closed-loop client."""

    @abstractmethod
    async def call(self) -> Any:
        """Send once on any free connection (open loop: many calls in flight)."""

    @abstractmethod
    async def close(self) -> None:
        """Close every connection."""


class HttpPool:
    """Keep-alive connections to one server: each request takes the idle connection used
    last, or opens one when every connection has a request in flight (an open loop has as
    many as it has requests in flight). Connections the server closed while idle (its
    keep-alive timeout) are dropped."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._all: list[HttpConnection] = []
        self._idle: list[HttpConnection] = []

    async def open(self) -> HttpConnection:
        """A new connection of the pool's (BenchError if the server cannot be reached)."""
        try:
            connection = await HttpConnection.open(self._host, self._port)
        except OSError as exc:
            raise BenchError(f"cannot connect to http {self._host}:{self._port}: {exc}") from None
        self._all.append(connection)
        return connection

    async def send(self, request: bytes) -> tuple[bytes, bytes]:
        """Like :meth:`HttpConnection.send`, on an idle connection or a new one."""
        while self._idle and not self._idle[-1].is_open:
            self._idle.pop()
        connection = self._idle.pop() if self._idle else await self.open()
        answer = await connection.send(request)
        # only a connection whose answer was read in full can carry the next request
        self._idle.append(connection)
        return answer

    async def close(self) -> None:
        for connection in self._all:
            connection.close()
        self._all.clear()
        self._idle.clear()


class HttpClient(InferClient):
    """HTTP/1.1 over raw keep-alive connections."""

    def __init__(self, host: str, port: int, request: bytes) -> None:
        self._pool = HttpPool(host, port)
        self._request = request

    async def lane(self) -> Send:
        connection = await self._pool.open()
        request = self._request
        return lambda: connection.send(request)

    async def call(self) -> tuple[bytes, bytes]:
        return await self._pool.send(self._request)

    async def close(self) -> None:
        await self._pool.close()


class GrpcClient(InferClient):
    """``ModelInfer`` on one grpc.aio channel, request and answer as raw bytes."""

    def __init__(self, target: str, request: bytes) -> None:
        self._channel, self._method = grpc_infer(target)
        self._request = request

    async def call(self) -> bytes:
        import grpc

        try:
            return cast(bytes, await self._method(self._request))
        except grpc.aio.AioRpcError as exc:
            raise RequestFailed(f"{exc.code().name}: {exc.details()}") from None

    async def lane(self) -> Send:
        return self.call

    async def close(self) -> None:
        await self._channel.close()


MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
#: the largest message either way on a grpc.aio channel of the bench's
MESSAGE_LIMIT = 256 * 1024 * 1024


def grpc_infer(target: str) -> tuple[Any, Callable[[bytes], Awaitable[bytes]]]:
    """A grpc.aio channel to ``target`` and its ModelInfer method, taking and returning raw
    bytes (no serialisers: the request is encoded already and the answer stays bytes)."""
    import grpc

    channel = grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", MESSAGE_LIMIT),
            ("grpc.max_receive_message_length", MESSAGE_LIMIT),
        ],
    )
    return channel, channel.unary_unary(MODEL_INFER)
