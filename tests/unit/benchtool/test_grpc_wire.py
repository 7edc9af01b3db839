"""GrpcConnection against real servers on loopback ports: grpcio's, ours (in-process, with
add_sub), and a scripted HTTP/2 peer that writes exactly the frames a test needs (flow
control, queueing, CONTINUATION, resets, GOAWAY). Every wait has a deadline, so a client
that hangs fails its test instead of hanging it."""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import grpc
import hpack
import numpy as np
import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.frontends.grpc import GrpcFrontend
from inferplex.server import build_engine
from inferplex_tools.benchtool.clients import ConnectionClosed, RequestFailed
from inferplex_tools.benchtool.grpc_wire import RECEIVE_WINDOW, GrpcConnection
from inferplex_tools.benchtool.payloads import TensorPlan, decode_grpc, grpc_request

HOST = "127.0.0.1"
DEADLINE_S = 10.0
T = TypeVar("T")

# HTTP/2 frame types, flags and settings, as the scripted peer writes them
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 2, 3, 4, 6, 7, 8
CONTINUATION = 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 3, 4, 5
CANCEL, REFUSED_STREAM = 8, 7
FRAME = struct.Struct(">BHBBL")


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, DEADLINE_S)


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that differ from a shifted copy, so misplaced pieces show."""
    return (bytes(range(seed % 256, 256)) + bytes(range(256)) * (size // 256 + 1))[:size]


# -- grpcio's server ------------------------------------------------------------------------
async def echo(request: bytes, context: Any) -> bytes:
    return request


async def reverse(request: bytes, context: Any) -> bytes:
    return request[::-1]


async def abort(request: bytes, context: Any) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad thing: 100% ünïcode")
    raise AssertionError("abort returns no answer")


@pytest.fixture
async def grpcio_port() -> AsyncIterator[int]:
    port, server = await start_grpcio()
    yield port
    await server.stop(None)


async def start_grpcio() -> tuple[int, Any]:
    limit = 16 << 20
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
        ]
    )
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(function)  # no (de)serialisers: raw bytes
        for name, function in (("Echo", echo), ("Reverse", reverse), ("Abort", abort))
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Wire", handlers)])
    port = server.add_insecure_port(f"{HOST}:0")
    await server.start()
    return port, server


async def round_trips(port: int) -> None:
    """Small, empty and 3 MiB messages (above every default window, both ways), then 16
    calls at once on the one connection."""
    connection = await within(GrpcConnection.open(HOST, port))
    try:
        assert await within(connection.call(connection.request("/test.Wire/Echo", b"hi"))) == b"hi"
        assert await within(connection.call(connection.request("/test.Wire/Echo", b""))) == b""
        big = pattern(3 << 20)
        answer = await within(connection.call(connection.request("/test.Wire/Reverse", big)))
        assert answer == big[::-1]
        messages = [pattern(size, seed) for seed, size in enumerate([10, 200_000] * 8)]
        calls = [connection.call(connection.request("/test.Wire/Reverse", m)) for m in messages]
        answers = await within(asyncio.gather(*calls))
        assert answers == [m[::-1] for m in messages]
        assert connection.is_open
    finally:
        connection.close()


async def test_round_trips_with_grpcio(grpcio_port: int) -> None:
    await round_trips(grpcio_port)


async def test_small_receive_window_is_replenished(grpcio_port: int) -> None:
    """With windows of 64 KiB a 3 MiB answer flows only if we give the window back."""
    connection = await within(GrpcConnection.open(HOST, grpcio_port, receive_window=65_535))
    big = pattern(3 << 20, 7)
    answer = await within(connection.call(connection.request("/test.Wire/Echo", big)))
    assert answer == big
    connection.close()


async def test_many_sequential_calls_never_stall(grpcio_port: int) -> None:
    """300 x 100 KiB: twice the 16 MiB connection window each way."""
    connection = await within(GrpcConnection.open(HOST, grpcio_port))
    prepared = connection.request("/test.Wire/Echo", pattern(100 << 10, 3))
    for _ in range(300):
        assert await within(connection.call(prepared)) == pattern(100 << 10, 3)
    connection.close()


async def test_abort_and_unknown_method_fail_with_their_status(grpcio_port: int) -> None:
    connection = await within(GrpcConnection.open(HOST, grpcio_port))
    with pytest.raises(RequestFailed, match=r"^INVALID_ARGUMENT: bad thing: 100% ünïcode$"):
        await within(connection.call(connection.request("/test.Wire/Abort", b"x")))
    with pytest.raises(RequestFailed, match=r"^UNIMPLEMENTED"):
        await within(connection.call(connection.request("/test.Wire/Nope", b"x")))
    assert await within(connection.call(connection.request("/test.Wire/Echo", b"ok"))) == b"ok"
    connection.close()


async def test_close_fails_pending_calls(grpcio_port: int) -> None:
    connection = await within(GrpcConnection.open(HOST, grpcio_port))
    pending = asyncio.ensure_future(connection.call(connection.request("/test.Wire/Echo", b"x")))
    connection.close()
    with pytest.raises(ConnectionClosed):
        await within(pending)
    assert not connection.is_open
    with pytest.raises(ConnectionClosed):
        await connection.call(connection.request("/test.Wire/Echo", b"x"))


def test_round_trips_on_uvloop() -> None:
    """The benchmark's loop: its transports write lists of buffers without joining them."""
    import uvloop

    async def scenario() -> None:
        port, server = await start_grpcio()
        try:
            await round_trips(port)
        finally:
            await server.stop(None)

    uvloop.run(scenario())


# -- our own server ----------------------------------------------------------------------------
@pytest.fixture
async def inferplex_port(tmp_path: Path) -> AsyncIterator[int]:
    path = modelgen.add_sub(tmp_path)
    write_config(tmp_path / "add_sub", modelgen.model_config(path, max_batch_size=8))
    config = ServerConfig(model_repository=tmp_path, grpc_port=0)
    engine = build_engine(config)
    await engine.start()
    frontend = GrpcFrontend(engine, config)
    port = await frontend.start()
    yield port
    await frontend.stop(0)
    await engine.stop()


INFER = "/inference.GRPCInferenceService/ModelInfer"
PLANS = [TensorPlan("INPUT0", "FP32", (2, 16)), TensorPlan("INPUT1", "FP32", (2, 16))]


async def test_model_infer_on_our_server(inferplex_port: int) -> None:
    connection = await within(GrpcConnection.open(HOST, inferplex_port))
    requests = []
    for seed in range(8):
        a = np.arange(32, dtype=np.float32).reshape(2, 16) * seed
        b = np.full((2, 16), 0.5, dtype=np.float32)
        message = grpc_request("add_sub", "", PLANS, {"INPUT0": a, "INPUT1": b}, ["OUTPUT0"])
        requests.append((connection.request(INFER, message), a, b))
    answers = await within(asyncio.gather(*(connection.call(r[0]) for r in requests)))
    for answer, (_, a, b) in zip(answers, requests, strict=True):
        outputs = decode_grpc(answer)
        assert list(outputs) == ["OUTPUT0"]
        np.testing.assert_array_equal(outputs["OUTPUT0"][1], a + b)
    unknown = grpc_request("no_such_model", "", PLANS, {"INPUT0": a, "INPUT1": b}, [])
    with pytest.raises(RequestFailed, match=r"^NOT_FOUND: .*no_such_model"):
        await within(connection.call(connection.request(INFER, unknown)))
    connection.close()


# -- a scripted HTTP/2 peer ---------------------------------------------------------------------
def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return FRAME.pack(len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream_id) + payload


def grpc_data(message: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BL", flag, len(message)) + message


class Peer:
    """The server end of one connection, frame by frame: the test reads what the client
    sent and writes what it wants the client to see."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.encoder = hpack.Encoder()  # indexes and Huffman-codes: the client's decoder works
        self.frames: list[tuple[int, int, int, bytes]] = []  # every frame read, in order

    async def read(self) -> tuple[int, int, int, bytes]:
        high, low, kind, flags, stream_id = FRAME.unpack(await within(self.reader.readexactly(9)))
        payload = await within(self.reader.readexactly((high << 16) | low))
        self.frames.append((kind, flags, stream_id, payload))
        return kind, flags, stream_id, payload

    async def expect(self, kind: int) -> tuple[int, int, bytes]:
        """The next frame of ``kind`` (WINDOW_UPDATE frames before it are passed over)."""
        while True:
            got, flags, stream_id, payload = await self.read()
            if got == kind:
                return flags, stream_id, payload
            assert got == WINDOW_UPDATE, f"expected frame type {kind}, got {got}"

    async def request(self) -> tuple[int, bytes]:
        """A whole request: its stream id and body."""
        flags, stream_id, _ = await self.expect(HEADERS)
        body = b""
        while not flags & END_STREAM:
            flags, data_stream, payload = await self.expect(DATA)
            assert data_stream == stream_id
            body += payload
        return stream_id, body

    def block(self, **headers: str) -> bytes:
        """``_status="200", grpc_status="0"``: ``:status: 200``, ``grpc-status: 0``."""
        names = [(":" + k[1:] if k[0] == "_" else k).replace("_", "-") for k in headers]
        return self.encoder.encode(list(zip(names, headers.values(), strict=True)))

    def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))

    def answer(self, stream_id: int, message: bytes) -> None:
        head = self.block(_status="200", content_type="application/grpc")
        self.send(
            frame(HEADERS, END_HEADERS, stream_id, head),
            frame(DATA, 0, stream_id, grpc_data(message)),
            frame(HEADERS, END_HEADERS | END_STREAM, stream_id, self.block(grpc_status="0")),
        )


Pair = tuple[GrpcConnection, Peer]


@pytest.fixture
async def connect() -> AsyncIterator[Callable[..., Awaitable[Pair]]]:
    """``await connect(settings, receive_window)``: a client and the peer it talks to, once
    the client has acknowledged the peer's SETTINGS (so they apply to its next call)."""
    opened: list[Pair] = []
    servers: list[asyncio.Server] = []

    async def open_pair(settings: dict[int, int] | None = None, receive_window: int = 0) -> Pair:
        accepted: asyncio.Future[Peer] = asyncio.get_running_loop().create_future()
        server = await asyncio.start_server(lambda r, w: accepted.set_result(Peer(r, w)), HOST, 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        connection = await within(GrpcConnection.open(HOST, port, receive_window=receive_window))
        peer = await within(accepted)
        opened.append((connection, peer))
        preface = await within(peer.reader.readexactly(24))
        assert preface == b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        flags, _, payload = await peer.expect(SETTINGS)
        assert not flags & ACK and (2, 0) in struct.iter_unpack(">HL", payload)  # no push
        values = b"".join(struct.pack(">HL", k, v) for k, v in (settings or {}).items())
        peer.send(frame(SETTINGS, 0, 0, values))
        assert (await peer.expect(SETTINGS))[0] == ACK
        return connection, peer

    yield open_pair
    for connection, peer in opened:
        connection.close()
        peer.writer.close()
    for server in servers:
        server.close()
        await server.wait_closed()


def request(connection: GrpcConnection, message: bytes) -> asyncio.Future[bytes]:
    return asyncio.ensure_future(connection.call(connection.request("/s.S/M", message)))


async def test_preface_settings_and_ping(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect()
    window_updates = [f for f in peer.frames if f[0] == WINDOW_UPDATE]
    assert window_updates == [(WINDOW_UPDATE, 0, 0, struct.pack(">L", RECEIVE_WINDOW - 65_535))]
    peer.send(frame(PING, 0, 0, b"12345678"))
    assert await peer.expect(PING) == (ACK, 0, b"12345678")
    call = request(connection, b"abc")
    stream_id, body = await peer.request()
    assert stream_id == 1 and body == grpc_data(b"abc")
    kind, flags, _, block = peer.frames[-2]  # the request's HEADERS, one frame
    assert (kind, flags) == (HEADERS, END_HEADERS)
    assert dict(hpack.Decoder().decode(block)) == {
        ":method": "POST", ":scheme": "http", ":path": "/s.S/M",
        ":authority": f"{HOST}:{peer.writer.get_extra_info('sockname')[1]}",
        "content-type": "application/grpc", "te": "trailers",
    }  # fmt: skip
    peer.answer(stream_id, b"done")
    assert await within(call) == b"done"


async def test_sending_waits_for_the_windows(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect({INITIAL_WINDOW_SIZE: 100})
    call = request(connection, pattern(995))  # 1000 bytes with the gRPC prefix
    await peer.expect(HEADERS)
    assert (await peer.expect(DATA))[::2] == (0, grpc_data(pattern(995))[:100])
    peer.send(frame(WINDOW_UPDATE, 0, 1, struct.pack(">L", 300)))  # the stream's window
    assert (await peer.expect(DATA))[::2] == (0, grpc_data(pattern(995))[100:400])
    peer.send(frame(SETTINGS, 0, 0, struct.pack(">HL", INITIAL_WINDOW_SIZE, 1 << 20)))
    assert (await peer.expect(SETTINGS))[0] == ACK
    flags, _, rest = await peer.expect(DATA)  # a larger initial window applies to open streams
    assert flags == END_STREAM and rest == grpc_data(pattern(995))[400:]
    peer.answer(1, b"ok")
    assert await within(call) == b"ok"
    # the connection window (65,535 less the 1,000 sent) holds a 70 kB body back
    call = request(connection, pattern(70_000))
    assert (await peer.expect(HEADERS))[1] == 3
    sizes: list[int] = []
    while sum(sizes) < 64_535:
        flags, _, payload = await peer.expect(DATA)
        assert not flags & END_STREAM and len(payload) <= 16_384
        sizes.append(len(payload))
    assert sum(sizes) == 64_535
    peer.send(frame(WINDOW_UPDATE, 0, 0, struct.pack(">L", 10_000)))
    flags, _, payload = await peer.expect(DATA)
    assert flags == END_STREAM and sum(sizes) + len(payload) == 70_005
    peer.answer(3, b"ok")
    assert await within(call) == b"ok"


async def test_data_frames_follow_the_server_s_max_frame_size(
    connect: Callable[..., Awaitable[Pair]],
) -> None:
    connection, peer = await connect({MAX_FRAME_SIZE: 40_000})
    call = request(connection, pattern(60_000))
    await peer.expect(HEADERS)
    frames = [await peer.expect(DATA) for _ in range(2)]
    assert [(flags, len(payload)) for flags, _, payload in frames] == [(0, 40_000), (1, 20_005)]
    peer.answer(1, b"ok")
    assert await within(call) == b"ok"


async def test_calls_beyond_max_concurrent_streams_wait(
    connect: Callable[..., Awaitable[Pair]],
) -> None:
    connection, peer = await connect({MAX_CONCURRENT_STREAMS: 1})
    calls = [request(connection, bytes([n])) for n in range(3)]
    for n, stream_id in enumerate((1, 3, 5)):
        assert (await peer.request())[0] == stream_id
        # had the client not waited, the next call's HEADERS would come before this ACK
        peer.send(frame(PING, 0, 0, b"in order"))
        assert (await peer.read())[:2] == (PING, ACK)
        peer.answer(stream_id, bytes([n]) * 2)
    assert await within(asyncio.gather(*calls)) == [b"\0\0", b"\1\1", b"\2\2"]


async def test_continuation_padding_and_ignored_frames(
    connect: Callable[..., Awaitable[Pair]],
) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    head = peer.block(_status="200", content_type="application/grpc", x_filler="f" * 100)
    body = grpc_data(pattern(50_000))
    trailers = peer.block(grpc_status="0", grpc_message="")
    peer.send(
        frame(HEADERS, PADDED, stream_id, b"\x03" + head[:10] + b"pad"),
        frame(CONTINUATION, 0, stream_id, head[10:40]),
        frame(CONTINUATION, END_HEADERS, stream_id, head[40:]),
        frame(DATA, 0, stream_id, body[:3]),  # the 5-byte prefix over two frames
        frame(0xFA, 0, stream_id, b"an unknown frame type"),
        frame(PRIORITY, 0, stream_id, b"\0\0\0\0\x10"),
        frame(DATA, PADDED, stream_id, b"\x02" + body[3:30_000] + b"\0\0"),
        frame(DATA, 0, stream_id, body[30_000:]),
        frame(HEADERS, END_STREAM | PRIORITY_FLAG, stream_id, b"\0\0\0\0\x10" + trailers[:2]),
        frame(CONTINUATION, END_HEADERS, stream_id, trailers[2:]),
    )
    assert await within(call) == pattern(50_000)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (
            {"_status": "200", "grpc_status": "5", "grpc_message": quote("no such model: é")},
            "NOT_FOUND: no such model: é",
        ),
        ({"_status": "503"}, "UNAVAILABLE: HTTP 503"),
        ({"_status": "200"}, "UNKNOWN: an answer without grpc-status"),
    ],
)
async def test_trailers_only_answers(
    connect: Callable[..., Awaitable[Pair]], headers: dict[str, str], expected: str
) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    peer.send(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, peer.block(**headers)))
    with pytest.raises(RequestFailed) as info:
        await within(call)
    assert str(info.value) == expected and not isinstance(info.value, ConnectionClosed)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (grpc_data(b"zipped", flag=1), "INTERNAL: a message with flags 1"),
        (grpc_data(b"abc")[:-1], "INTERNAL: 2 bytes after a prefix of 3"),
        (grpc_data(b"a") + grpc_data(b"b"), "INTERNAL: 7 bytes after a prefix of 1"),
    ],
)
async def test_malformed_messages_fail_the_call_only(
    connect: Callable[..., Awaitable[Pair]], data: bytes, expected: str
) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    peer.send(
        frame(HEADERS, END_HEADERS, stream_id, peer.block(_status="200")),
        frame(DATA, 0, stream_id, data),
        frame(HEADERS, END_HEADERS | END_STREAM, stream_id, peer.block(grpc_status="0")),
    )
    with pytest.raises(RequestFailed, match=f"^{re.escape(expected)}"):
        await within(call)
    call = request(connection, b"again")
    stream_id, _ = await peer.request()
    peer.answer(stream_id, b"fine")
    assert await within(call) == b"fine"


async def test_reset_streams(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    peer.send(frame(RST_STREAM, 0, stream_id, struct.pack(">L", CANCEL)))
    with pytest.raises(RequestFailed, match=r"^CANCELLED"):
        await within(call)
    call = request(connection, b"refused, then sent again")
    stream_id, body = await peer.request()
    peer.send(frame(RST_STREAM, 0, stream_id, struct.pack(">L", REFUSED_STREAM)))
    retried, body_again = await peer.request()
    assert (stream_id, retried) == (3, 5) and body_again == body
    peer.answer(retried, b"second time")
    assert await within(call) == b"second time"


async def test_a_cancelled_call_resets_its_stream(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    call.cancel()
    assert await peer.expect(RST_STREAM) == (0, stream_id, struct.pack(">L", CANCEL))
    peer.answer(stream_id, b"too late")  # in flight when the reset went: dropped
    call = request(connection, b"next")
    stream_id, _ = await peer.request()
    peer.answer(stream_id, b"next answer")
    assert await within(call) == b"next answer"


async def test_goaway(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect()
    calls = [request(connection, b"1"), request(connection, b"2")]
    assert [(await peer.request())[0] for _ in calls] == [1, 3]
    peer.send(frame(GOAWAY, 0, 0, struct.pack(">LL", 1, 0) + b"bye"))
    with pytest.raises(ConnectionClosed, match=r"GOAWAY.*bye"):
        await within(calls[1])  # not processed: another connection may take it
    assert not connection.is_open
    with pytest.raises(ConnectionClosed):
        await connection.call(connection.request("/s.S/M", b"3"))
    peer.answer(1, b"first")  # streams up to the last id still finish
    assert await within(calls[0]) == b"first"
    assert await within(peer.reader.read()) == b""  # then the client closes the connection


async def test_connection_lost_fails_pending_calls(
    connect: Callable[..., Awaitable[Pair]],
) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    await peer.request()
    peer.writer.close()
    with pytest.raises(ConnectionClosed, match="closed the connection"):
        await within(call)
    assert not connection.is_open


async def test_receive_windows_are_given_back(connect: Callable[..., Awaitable[Pair]]) -> None:
    connection, peer = await connect(receive_window=65_535)
    call = request(connection, b"q")
    stream_id, _ = await peer.request()
    body = grpc_data(pattern(100_000))
    peer.send(frame(HEADERS, END_HEADERS, stream_id, peer.block(_status="200")))
    peer.send(
        frame(DATA, 0, stream_id, body[:16_384]), frame(DATA, 0, stream_id, body[16_384:32_768])
    )
    updates = {(await peer.read())[2:] for _ in range(2)}  # half of each window was used
    assert updates == {(0, struct.pack(">L", 32_768)), (stream_id, struct.pack(">L", 32_768))}
    for start in range(32_768, len(body), 16_384):
        peer.send(frame(DATA, 0, stream_id, body[start : start + 16_384]))
    peer.send(frame(HEADERS, END_HEADERS | END_STREAM, stream_id, peer.block(grpc_status="0")))
    assert await within(call) == pattern(100_000)


async def test_protocol_errors_end_the_connection(
    connect: Callable[..., Awaitable[Pair]],
) -> None:
    connection, peer = await connect()
    call = request(connection, b"q")
    await peer.request()
    peer.send(frame(DATA, 0, 0, b"DATA on stream 0"))
    _, _, payload = await peer.expect(GOAWAY)
    assert struct.unpack(">LL", payload[:8])[1] == 1  # PROTOCOL_ERROR
    with pytest.raises(ConnectionClosed, match="protocol error"):
        await within(call)
