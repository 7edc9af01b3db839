"""Raw HTTP/2 frames against the built-in gRPC server, as h2spec drives a server: a socket
client that writes any frame (valid or not) and reads the server's frames one by one, and
the server itself (GrpcServer, on uvloop in a thread) on a free loopback port with the
limits a test asks for. Every read has a deadline: a server that hangs fails the test."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hpack
import uvloop

from inferplex.transport.grpc_server import GrpcServer, Method
from inferplex.transport.http2_limits import Http2Limits
from inferplex.transport.listener import GrpcLimits, ListenerSpec
from inferplex.transport.sockets import bind

HOST = "127.0.0.1"
#: seconds any one wait for the server may take before the test fails
TIMEOUT = 5.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# frame types, flags, error codes, settings (RFC 9113 sections 6, 7)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE = 0, 1, 2, 3, 4, 5
PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x3
STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL = 0x5, 0x6, 0x7, 0x8
COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x9, 0xB
HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 0x4, 0x5

LIVE = "/test.Health/Live"
SLOW = "/test.Slow/Wait"
ECHO = "/test.Echo/Echo"


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (
        struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload
    )


def settings(*pairs: tuple[int, int], flags: int = 0) -> bytes:
    return frame(SETTINGS, flags, 0, b"".join(struct.pack(">HI", k, v) for k, v in pairs))


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def grpc_message(body: bytes) -> bytes:
    return b"\0" + u32(len(body)) + body


@dataclass
class Frame:
    kind: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def code(self) -> int:
        """The error code of a RST_STREAM or GOAWAY."""
        offset = 4 if self.kind == GOAWAY else 0
        return int(struct.unpack_from(">I", self.payload, offset)[0])


@dataclass
class Conn:
    """One client connection, frame by frame."""

    port: int
    sock: socket.socket = field(init=False)
    encoder: hpack.Encoder = field(default_factory=hpack.Encoder)
    decoder: hpack.Decoder = field(default_factory=hpack.Decoder)
    received: list[Frame] = field(default_factory=list)
    closed: bool = False
    reset_by_peer: bool = False
    _inbound: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self.sock = socket.create_connection((HOST, self.port), timeout=TIMEOUT)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, *data: bytes) -> None:
        try:
            self.sock.sendall(b"".join(data))
        except (BrokenPipeError, ConnectionResetError):
            self.closed = True

    def handshake(self, *pairs: tuple[int, int]) -> None:
        """The preface and our SETTINGS; the server's SETTINGS acknowledged, ours too."""
        self.send(PREFACE, settings(*pairs))
        self.expect(lambda f: f.kind == SETTINGS and not f.flags & ACK, "the server's SETTINGS")
        self.send(settings(flags=ACK))
        self.expect(lambda f: f.kind == SETTINGS and bool(f.flags & ACK), "a SETTINGS ACK")

    # -- requests --------------------------------------------------------------------------
    def fields(self, path: str = LIVE, **extra: str) -> list[tuple[str, str]]:
        return [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", f"{HOST}:{self.port}"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *((k.replace("_", "-"), v) for k, v in extra.items()),
        ]

    def headers(
        self,
        stream_id: int,
        fields: list[tuple[str, str]] | None = None,
        flags: int = END_HEADERS,
    ) -> bytes:
        block = self.encoder.encode(fields if fields is not None else self.fields())
        return frame(HEADERS, flags, stream_id, block)

    def call(self, stream_id: int, path: str = LIVE, body: bytes = b"") -> bytes:
        """A complete unary call's frames."""
        return self.headers(stream_id, self.fields(path)) + frame(
            DATA, END_STREAM, stream_id, grpc_message(body)
        )

    # -- reading ---------------------------------------------------------------------------
    def read(self, timeout: float = TIMEOUT) -> Frame | None:
        """The next frame; None once the server has closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._inbound) >= 9:
                length = int.from_bytes(self._inbound[:3], "big")
                if len(self._inbound) >= 9 + length:
                    data = bytes(self._inbound[: 9 + length])
                    del self._inbound[: 9 + length]
                    kind, flags, stream_id = struct.unpack_from(">BBI", data, 3)
                    got = Frame(kind, flags, stream_id & 0x7FFFFFFF, data[9:])
                    self.received.append(got)
                    if got.kind == SETTINGS and not got.flags & ACK:
                        pass  # acknowledged by handshake(); later ones need no answer here
                    return got
            if self.closed:
                return None
            left = deadline - time.monotonic()
            assert left > 0, "the server sent nothing in time"
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                self.closed = self.reset_by_peer = True
                return None
            except TimeoutError:
                raise AssertionError("the server sent nothing in time") from None
            if not data:
                self.closed = True
            self._inbound += data

    def expect(self, match: Callable[[Frame], bool], what: str) -> Frame:
        while True:
            got = self.read()
            assert got is not None, f"the connection closed before {what}"
            if match(got):
                return got

    def connection_error(self, code: int) -> None:
        """GOAWAY with ``code``, then the server's FIN (not a reset)."""
        goaway = self.expect(lambda f: f.kind == GOAWAY, f"GOAWAY ({code:#x})")
        assert goaway.code == code, f"GOAWAY {goaway.code:#x}, expected {code:#x}"
        while self.read() is not None:
            pass
        assert not self.reset_by_peer, "the connection was reset, not closed"

    def stream_error(self, stream_id: int, *codes: int) -> int:
        """RST_STREAM on the stream with one of ``codes``, or a connection error with one."""
        got = self.expect(
            lambda f: (f.kind == RST_STREAM and f.stream_id == stream_id) or f.kind == GOAWAY,
            f"RST_STREAM or GOAWAY {codes}",
        )
        assert got.code in codes, (
            f"{'GOAWAY' if got.kind == GOAWAY else 'RST_STREAM'} {got.code:#x}"
        )
        return got.kind

    def response(self, stream_id: int) -> list[tuple[bytes, bytes]]:
        """The header fields of the response on the stream (its first header block)."""
        got = self.expect(lambda f: f.kind == HEADERS and f.stream_id == stream_id, "HEADERS")
        return list(self.decoder.decode(got.payload, raw=True))

    def grpc_status(self, stream_id: int) -> int:
        """The grpc-status of the stream's response (from its last header block)."""
        status = None
        while status is None:
            got = self.expect(lambda f: f.kind == HEADERS and f.stream_id == stream_id, "HEADERS")
            fields = dict(self.decoder.decode(got.payload, raw=True))
            if b"grpc-status" in fields:
                status = int(fields[b"grpc-status"])
        return status

    def alive(self) -> None:
        """The connection still works: a PING is answered."""
        self.send(frame(PING, 0, 0, b"stillok?"))
        self.expect(lambda f: f.kind == PING and f.payload == b"stillok?", "the PING's ACK")


def open_slow(conn: Conn, stream_id: int) -> None:
    """A stream that stays open: its request is complete, its answer waits a minute."""
    conn.send(conn.call(stream_id, SLOW))


# -- the server ------------------------------------------------------------------------------


@dataclass
class Served:
    """A GrpcServer on its own loop in a thread; what its slow method saw."""

    port: int
    server: GrpcServer
    loop: asyncio.AbstractEventLoop
    slow_started: int = 0
    slow_cancelled: int = 0

    def run(self, function: Callable[[], Any]) -> Any:
        """Call ``function`` on the server's loop and return what it returns."""

        async def call() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(TIMEOUT)


@contextlib.contextmanager
def serving(limits: Http2Limits | None = None) -> Iterator[Served]:
    """The built-in server with three methods: LIVE answers at once, SLOW waits (up to a
    minute: until cancelled, in the tests), ECHO returns the message."""
    loop = uvloop.new_event_loop()
    holder: dict[str, Served] = {}

    async def live(message: Any, call: Any) -> bytes:
        return b""

    async def slow(message: Any, call: Any) -> bytes:
        served = holder["served"]
        served.slow_started += 1
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            served.slow_cancelled += 1
            raise
        return b""

    async def echo(message: Any, call: Any) -> bytes:
        return bytes(message)

    def raw(message: Any) -> Any:
        return message

    methods = {
        LIVE: Method(live, raw, raw),
        SLOW: Method(slow, raw, raw),
        ECHO: Method(echo, raw, raw),
    }
    spec = ListenerSpec(http2=limits or Http2Limits(), grpc=GrpcLimits(max_message_bytes=32 << 20))
    server = GrpcServer(methods, spec)
    port = loop.run_until_complete(server.start(bind(HOST, 0, "gRPC")))
    holder["served"] = served = Served(port, server, loop)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(TIMEOUT * 2)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT)
        loop.close()
