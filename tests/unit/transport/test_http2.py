"""Pieces of the built-in gRPC server that need no socket: the grpc-timeout and grpc-message
encodings, and a connection reading request bodies cut at every boundary (driven as
transports drive a BufferedProtocol). Frames and HPACK are tested in test_http2_wire.py, the
wire behaviour in tests/integration/test_grpc_http2.py."""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import chain, zip_longest

import hpack
import numpy as np
import pytest

from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2.grpc_codec import decode_infer_request_bytes
from inferplex.transport.grpc_call import timeout_seconds
from inferplex.transport.grpc_stream import percent_encode
from inferplex.transport.http2 import (
    CONNECTION_WINDOW,
    READ_BUFFER,
    RECEIVE_FRAME_SIZE,
    STREAM_WINDOW,
    Http2Connection,
    Stream,
)
from inferplex.transport.http2_base import LINGER_S
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_wire import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
    literal_header_block,
)
from inferplex.transport.http_limits import ByteBudget


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(b"1S", 1.0), (b"250m", 0.25), (b"5M", 300.0), (b"2H", 7200.0), (b"100u", 1e-4),
     (b"7n", 7e-9), (b"99999999S", 99999999.0)],
)  # fmt: skip
def test_grpc_timeout(value: bytes, seconds: float) -> None:
    assert timeout_seconds(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"S", b"1", b"1x", b"-1S", b"123456789S", b"1.5S"])
def test_malformed_grpc_timeout_is_no_deadline(value: bytes) -> None:
    assert timeout_seconds(value) is None


def test_grpc_message_percent_encoding() -> None:
    assert percent_encode("plain text: ok") == b"plain text: ok"
    assert percent_encode("100%") == b"100%25"
    assert percent_encode("line\nbreak") == b"line%0Abreak"
    assert percent_encode("µs") == b"%C2%B5s"


# ---------------------------------------------------------------------- reading bodies
#
# A connection driven as uvloop and asyncio's transports drive a BufferedProtocol:
# get_buffer, a read of at most that much into it, buffer_updated.


class _Transport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.eof = False  # our FIN
        self.sends = 0

    def write(self, data: bytes) -> None:
        assert not self.eof and not self.closed, "written after write_eof or the close"
        self.written += data
        self.sends += 1

    def writelines(self, data: list[bytes]) -> None:
        assert not self.eof and not self.closed, "written after write_eof or the close"
        self.written += b"".join(data)
        self.sends += 1

    def close(self) -> None:
        self.closed = True

    abort = close

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Timer:
    def __init__(self, at: float, callback: Callable[[], object]) -> None:
        self.at = at
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Clock:
    """The parts of an event loop a connection uses, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[_Timer] = []
        self.soon: list[Callable[[], object]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, at: float, callback: Callable[[], object]) -> _Timer:
        timer = _Timer(at, callback)
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[[], object]) -> _Timer:
        return self.call_at(self.now + delay, callback)

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.soon.append(callback)

    def turn(self) -> None:
        """The end of a turn of the loop: the callbacks queued during it run."""
        soon, self.soon = self.soon, []
        for callback in soon:
            callback()

    def advance(self, seconds: float) -> None:
        """Move the clock, firing the timers due on the way, in order."""
        end = self.now + seconds
        while True:
            due = [t for t in self.timers if not t.cancelled and t.at <= end]
            if not due:
                break
            timer = min(due, key=lambda t: t.at)
            self.timers.remove(timer)
            self.now = max(self.now, timer.at)
            timer.callback()
            self.turn()
        self.now = end


class _App:
    """Asks for a gRPC-like head (flag byte, 4-byte length) and records what it gets."""

    def __init__(self, *, head_size: int = 5, announce: bool = True, limit: int = 1 << 30):
        self.head_size = head_size
        self.announce = announce
        self.limit = limit
        self.bodies: dict[int, bytes] = {}
        self.messages: dict[int, bytes | memoryview] = {}  # what follows the head
        self.sized: dict[int, bool] = {}  # the message after the head came as its buffer
        self.heads: list[tuple[int, bytes]] = []
        self.too_large: list[int] = []
        self.full: list[tuple[int, bool]] = []
        self.resets: list[int] = []

    def headers_received(self, connection: Http2Connection, stream: Stream) -> None:
        stream.head_size = self.head_size

    def body_head_received(
        self, connection: Http2Connection, stream: Stream, head: bytes
    ) -> int | None:
        self.heads.append((stream.id, head))
        length = int.from_bytes(head[1:5], "big")
        if length > self.limit:
            self.body_too_large(connection, stream)
            return None
        return length if self.announce else None

    def body_received(self, connection: Http2Connection, stream: Stream) -> None:
        self.bodies[stream.id] = bytes(stream.data())
        self.messages[stream.id] = stream.data(len(stream.head))
        self.sized[stream.id] = stream.data(len(stream.head)) is stream.buffer is not None

    def data_received(self, connection: Http2Connection, stream: Stream) -> None:
        pass  # bodies are read whole here

    def drained(self, connection: Http2Connection, stream: Stream) -> None:
        pass

    def body_too_large(self, connection: Http2Connection, stream: Stream) -> None:
        self.too_large.append(stream.id)
        connection.respond_headers_only(stream, literal_header_block([(b":status", b"413")]))

    def buffers_full(self, connection: Http2Connection, stream: Stream, server_wide: bool) -> None:
        self.full.append((stream.id, server_wide))
        connection.respond_headers_only(stream, literal_header_block([(b":status", b"503")]))

    def stream_reset(self, stream: Stream) -> None:
        self.resets.append(stream.id)


class _Peer:
    """A client's bytes, and a connection to feed them to."""

    def __init__(
        self,
        app: _App,
        max_body: int = 64 << 20,
        max_block: int = 1 << 20,
        read_buffer: memoryview | None = None,
        limits: Http2Limits | None = None,
        counters: Http2Counters | None = None,
    ) -> None:
        self.app = app
        self.transport = _Transport()
        self.loop = _Clock()
        self.connection = Http2Connection(
            app,
            set(),
            max_body_bytes=max_body,
            max_header_block_bytes=max_block,
            read_buffer=read_buffer,
            # 64 streams: their initial windows are 1 MiB (STREAM_WINDOW), which these
            # peers, sending as they please, stay within
            limits=limits or Http2Limits(max_concurrent_streams=64),
            counters=counters,
            loop=self.loop,  # type: ignore[arg-type]
        )
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.encoder = hpack.Encoder()
        self.direct = 0  # bytes read into a stream's buffer rather than the connection's

    @staticmethod
    def preface() -> bytes:
        return PREFACE + frame(SETTINGS, 0, 0)

    def headers(self, stream_id: int, flags: int = END_HEADERS, **extra: bytes) -> bytes:
        fields = [(b":method", b"POST"), (b":path", b"/s/m"), (b":scheme", b"http")]
        block = self.encoder.encode(fields + [(k.encode(), v) for k, v in extra.items()])
        return frame(HEADERS, flags, stream_id, block)

    def trailers(self, stream_id: int, **fields: bytes) -> bytes:
        block = self.encoder.encode([(k.encode(), v) for k, v in fields.items()])
        return frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block)

    def feed(self, data: bytes, pieces: Callable[[], int] | None = None) -> None:
        connection = self.connection
        view = memoryview(data)
        while view:
            buffer = connection.get_buffer(-1)
            assert len(buffer) > 0
            count = min(len(buffer), len(view), pieces() if pieces else len(view))
            buffer[:count] = view[:count]
            if connection._direct:
                self.direct += count
            view = view[count:]
            connection.buffer_updated(count)
            self.loop.turn()

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        """What the connection wrote: (type, flags, stream id, payload) per frame."""
        self.loop.turn()
        out, data = [], bytes(self.transport.written)
        while data:
            length = int.from_bytes(data[:3], "big")
            out.append((data[3], data[4], int.from_bytes(data[5:9], "big"), data[9 : 9 + length]))
            data = data[9 + length :]
        return out

    def sent(self, kind: int) -> list[tuple[int, bytes]]:
        return [(stream, payload) for k, _, stream, payload in self.frames() if k == kind]


def _message(size: int, seed: int = 0) -> bytes:
    payload = random.Random(seed).randbytes(size)
    return b"\0" + size.to_bytes(4, "big") + payload


def _data_frames(stream_id: int, body: bytes, size: int, *, end: bool = True) -> list[bytes]:
    chunks = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    frames = [frame(DATA, 0, stream_id, chunk) for chunk in chunks]
    if end:
        frames[-1] = frame(DATA, END_STREAM, stream_id, chunks[-1])
    return frames


def _cuts(kind: str, seed: int = 0) -> Callable[[], int] | None:
    if kind == "whole":
        return None
    if kind == "bytes":
        return lambda: 1
    rng = random.Random(seed)
    sizes = [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 17, 100, 4095, 16_384, 70_000]
    return lambda: rng.choice(sizes)


@pytest.mark.parametrize("cut", ["whole", "bytes", "random"])
@pytest.mark.parametrize("frame_size", [1, 3, 4, 5, 6, 7, 1000, 1 << 20])
def test_a_body_arrives_exactly_however_it_is_cut(cut: str, frame_size: int) -> None:
    size = 700 if cut == "bytes" or frame_size < 100 else 300_000
    body = _message(size, frame_size)
    peer = _Peer(_App())
    data = peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, frame_size))
    peer.feed(data, _cuts(cut, frame_size))
    assert peer.app.bodies == {1: body}
    assert peer.app.sized[1]  # the message is the buffer its prefix sized: no copy
    assert peer.app.heads == [(1, body[:5])]
    assert not peer.sent(GOAWAY) and not peer.sent(RST_STREAM)


def test_the_server_wide_limit_is_shared() -> None:
    budget = ByteBudget(1 << 20)
    peers = [_Peer(_App(), counters=Http2Counters(budget)) for _ in range(2)]
    bodies = [_message(700_000, n) for n in range(2)]
    for peer, body in zip(peers, bodies, strict=True):
        peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 100_000)[:4]))
    assert peers[0].connection.streams[1].buffer is not None  # sized: 700 KB held
    # not sized (700 KB more would pass 1 MiB), collected until it passes: refused
    assert peers[1].app.full == [(1, True)]
    assert budget.used == 700_000
    peers[0].feed(b"".join(_data_frames(1, bodies[0], 100_000)[4:]))
    assert peers[0].app.bodies == {1: bodies[0]}
    # the body stays charged while the call runs (a model may hold it), until it is answered
    assert budget.used == 700_000
    stream = peers[0].connection.streams[1]
    peers[0].connection.respond_headers_only(stream, literal_header_block([(b":status", b"200")]))
    assert budget.used == 0


def test_a_small_message_here_whole_is_handed_over_as_it_came() -> None:
    """A message whose frame is all in one read (a small request) needs no buffer sized for
    it: the application gets the piece it was copied into from the connection's buffer."""
    body = _message(200)
    peer = _Peer(_App())
    peer.feed(peer.preface() + peer.headers(1) + frame(DATA, END_STREAM, 1, body), None)
    assert peer.app.bodies == {1: body}
    assert peer.app.sized == {1: False}
    assert peer.app.messages == {1: body[5:]}
    assert peer.app.heads == [(1, body[:5])]


@pytest.mark.parametrize("cut", ["whole", "random"])
def test_large_payloads_are_read_into_place(cut: str) -> None:
    """Of a body in large frames, all but what came with the frames' headers is read by
    the transport straight into the message's buffer."""
    body = _message(600_000)
    peer = _Peer(_App())
    peer.feed(peer.preface() + peer.headers(1), None)
    for data in _data_frames(1, body, 200_000):
        peer.feed(data, _cuts(cut) if cut == "random" else lambda: 65_536)
    assert peer.app.bodies == {1: body}
    if cut == "whole":
        assert peer.direct >= len(body) - 3 * 65_536


@pytest.mark.parametrize("cut", ["whole", "bytes", "random"])
def test_interleaved_streams(cut: str) -> None:
    peer = _Peer(_App())
    one, three = _message(3000, 1), _message(2000, 3)
    # 5 frames of stream 1 and 7 of stream 3, alternating (stream 3's last two at the end)
    frames = zip_longest(_data_frames(1, one, 700), _data_frames(3, three, 300), fillvalue=b"")
    data = peer.preface() + peer.headers(1) + peer.headers(3) + b"".join(chain(*frames))
    peer.feed(data, _cuts(cut, 7))
    assert peer.app.bodies == {1: one, 3: three}
    assert peer.app.sized == {1: True, 3: True}


@pytest.mark.parametrize("cut", ["whole", "bytes", "random"])
@pytest.mark.parametrize(
    ("body", "sized"),
    [
        (_message(10) + b"extra", False),  # more than the prefix announced
        (_message(100)[:60], False),  # less
        (b"\0\0\0", False),  # not even a prefix
        (b"", False),
        (_message(0), False),  # the rest (nothing) is here whole with the prefix: no buffer
    ],
)
def test_bodies_that_are_not_as_announced_arrive_as_sent(
    cut: str, body: bytes, sized: bool
) -> None:
    peer = _Peer(_App())
    data = peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 4))
    peer.feed(data, _cuts(cut))
    assert peer.app.bodies == {1: body}
    assert peer.app.sized[1] is sized


@pytest.mark.parametrize("app", [_App(head_size=0), _App(announce=False)])
def test_bodies_not_sized_are_collected(app: _App) -> None:
    body = _message(50_000)
    peer = _Peer(app)
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 999)), _cuts("r"))
    assert app.bodies == {1: body}
    assert not app.sized[1]


def test_padded_frames() -> None:
    body = _message(5000)
    peer = _Peer(_App())
    data = peer.preface() + peer.headers(1)
    for index, offset in enumerate(range(0, len(body), 1000)):
        chunk = body[offset : offset + 1000]
        flags = END_STREAM if offset + 1000 >= len(body) else 0
        if index % 2:  # every other frame padded
            data += frame(DATA, flags | PADDED, 1, bytes([index]) + chunk + bytes(index))
        else:
            data += frame(DATA, flags, 1, chunk)
    peer.feed(data, _cuts("random"))
    assert peer.app.bodies == {1: body}
    assert peer.app.sized[1]
    bad = _Peer(_App())
    bad.feed(bad.preface() + bad.headers(1) + frame(DATA, PADDED, 1, b"\x09abc"))
    assert bad.sent(GOAWAY)[0][1][4:8] == (0x1).to_bytes(4, "big")  # PROTOCOL_ERROR


def test_trailers_end_a_request() -> None:
    body = _message(3000)
    peer = _Peer(_App())
    data = peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 1000, end=False))
    peer.feed(data + peer.trailers(1, x_trailer=b"1"), _cuts("random"))
    assert peer.app.bodies == {1: body}


def test_pseudo_header_fields_in_trailers_reset_the_stream() -> None:
    peer = _Peer(_App())
    data = peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(10), 5, end=False))
    peer.feed(data + peer.headers(1, END_HEADERS | END_STREAM))
    assert peer.sent(RST_STREAM) == [(1, (0x1).to_bytes(4, "big"))]  # PROTOCOL_ERROR
    assert peer.app.resets == [1] and not peer.app.bodies


def test_a_prefix_above_the_limit_is_refused_at_once() -> None:
    peer = _Peer(_App(limit=1000))
    peer.feed(peer.preface() + peer.headers(1) + frame(DATA, 0, 1, _message(1001)[:5]))
    assert peer.app.too_large == [1]
    assert [stream for stream, _ in peer.sent(HEADERS)] == [1]  # answered, nothing waited for
    assert peer.sent(RST_STREAM) == [(1, bytes(4))]  # NO_ERROR: stop sending
    # what is still on its way is read and dropped; the connection goes on
    rest = _message(1001)[5:]
    peer.feed(frame(DATA, 0, 1, rest[:500]) + frame(DATA, END_STREAM, 1, rest[500:]), lambda: 7)
    body = _message(1000)
    peer.feed(peer.headers(3) + b"".join(_data_frames(3, body, 300)), _cuts("random"))
    assert peer.app.bodies == {3: body}
    assert not peer.sent(GOAWAY)


def test_dropped_payloads_count_against_the_connection_window() -> None:
    """DATA for a stream we refused is read from the socket, dropped and acknowledged."""
    peer = _Peer(_App(limit=100))
    body = _message(9 << 20)
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 1 << 20)))
    assert peer.app.too_large == [1]
    # the first 8 frames of 1 MiB reach half the connection window
    assert (0, (CONNECTION_WINDOW // 2).to_bytes(4, "big")) in peer.sent(WINDOW_UPDATE)
    peer.feed(peer.headers(3) + b"".join(_data_frames(3, _message(20), 9)))
    assert peer.app.bodies == {3: _message(20)}


def test_a_body_above_the_connection_limit_is_collected_and_refused() -> None:
    peer = _Peer(_App(), max_body=1000)  # the application would allow it: the connection not
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(996), 100)))
    assert peer.app.too_large == [1]
    assert not peer.app.bodies


@pytest.mark.parametrize("cut", ["whole", "bytes", "random"])
def test_a_stream_reset_mid_body(cut: str) -> None:
    peer = _Peer(_App())
    body = _message(5000)
    frames = _data_frames(1, body, 1000)
    after = _message(3000, 2)
    data = (
        peer.preface()
        + peer.headers(1)
        + b"".join(frames[:2])
        + frame(RST_STREAM, 0, 1, (8).to_bytes(4, "big"))  # CANCEL
        + peer.headers(3)
        + b"".join(_data_frames(3, after, 700))
    )
    peer.feed(data, _cuts(cut))
    assert peer.app.resets == [1]
    assert peer.app.bodies == {3: after}
    assert not peer.sent(GOAWAY) and not peer.sent(RST_STREAM)
    # the peer itself reset it: more of its DATA is a protocol error (RFC 9113 5.1)
    peer.feed(b"".join(frames[2:]))
    (goaway,) = peer.sent(GOAWAY)
    assert goaway[1][4:8] == (0x5).to_bytes(4, "big")  # STREAM_CLOSED


@pytest.mark.parametrize("answer", ["headers-only", "whole"])
def test_an_answer_mid_frame_drops_the_rest_of_the_payload(answer: str) -> None:
    """The application may answer while a payload is being read into the stream's buffer
    (a deadline passing, or it needs no body): the rest of it and what follows are dropped,
    and the closed stream gets no more WINDOW_UPDATEs."""
    peer = _Peer(_App())
    body = _message(STREAM_WINDOW // 2 + 1000)
    data = frame(DATA, 0, 1, body)
    peer.feed(peer.preface() + peer.headers(1) + data[:30_000])
    stream = peer.connection.streams[1]
    if answer == "whole":
        peer.connection.respond(
            stream, literal_header_block([(b":status", b"200")]), b"", b"ok", b""
        )
    else:
        peer.connection.respond_headers_only(stream, literal_header_block([(b":status", b"504")]))
    after = _message(100, 5)
    rest = data[30_000:] + frame(DATA, END_STREAM, 1, b"")
    peer.feed(rest + peer.headers(3) + b"".join(_data_frames(3, after, 64)), _cuts("random"))
    assert peer.app.bodies == {3: after}
    assert stream.filled < 30_000  # nothing more was read into its buffer
    assert all(stream_id != 1 for stream_id, _ in peer.sent(WINDOW_UPDATE))
    assert not peer.sent(GOAWAY)


def test_data_after_the_end_of_a_stream_resets_it() -> None:
    peer = _Peer(_App())
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(10), 4)))
    assert peer.app.bodies == {1: _message(10)}
    peer.feed(frame(DATA, 0, 1, b"late") + peer.headers(3, END_HEADERS | END_STREAM))
    assert peer.sent(RST_STREAM) == [(1, (0x5).to_bytes(4, "big"))]  # STREAM_CLOSED
    assert peer.app.bodies[3] == b""


@pytest.mark.parametrize("cut", [3, 9, 50, 1000, 5000])
def test_connections_sharing_a_read_buffer_keep_what_they_have_not_handled(cut: int) -> None:
    """Reads of two connections alternate in one shared buffer, each cut mid-frame: the bytes
    a connection could not handle yet (a frame header, a header block) are its own to keep."""
    shared = memoryview(bytearray(READ_BUFFER))
    peers = [_Peer(_App(), read_buffer=shared) for _ in range(2)]
    bodies = [_message(3000, 1), _message(2000, 2)]
    streams = [
        peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 700))
        for peer, body in zip(peers, bodies, strict=True)
    ]
    for start in range(0, max(map(len, streams)), cut):
        for peer, data in zip(peers, streams, strict=True):
            if start < len(data):
                peer.feed(data[start : start + cut], None)
    for peer, body in zip(peers, bodies, strict=True):
        assert peer.app.bodies == {1: body}
        assert not peer.sent(GOAWAY)


@pytest.mark.parametrize("cut", ["whole", "bytes", "random"])
def test_a_header_block_larger_than_the_read_buffer(cut: str) -> None:
    """HEADERS and CONTINUATION frames are read whole: the buffer grows for them."""
    peer = _Peer(_App(), max_block=1 << 20)
    big = b"v" * 200_000
    block = literal_header_block(
        [(b":method", b"POST"), (b":path", b"/s/m"), (b":scheme", b"http"), (b"x-big", big)]
    )
    body = _message(1000)
    data = (
        peer.preface()
        + frame(HEADERS, 0, 1, block[:150_000])
        + frame(CONTINUATION, END_HEADERS, 1, block[150_000:])
        + b"".join(_data_frames(1, body, 600))
    )
    peer.feed(data, None if cut == "whole" else (lambda: 4096) if cut == "bytes" else _cuts(cut))
    assert peer.app.bodies == {1: body}
    # the next read: back to the shared buffer, the large one is let go
    assert peer.connection.get_buffer(-1) is peer.connection._shared


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"GET / HTTP/1.1\r\n", 0x1),  # not a preface: refused before 24 bytes arrive
        (PREFACE + frame(PING, 0, 0, bytes(8)), 0x1),  # the first frame is not SETTINGS
        (_Peer.preface() + frame(DATA, 0, 0, b"x"), 0x1),
        (_Peer.preface() + frame(DATA, 0, 5, b"x"), 0x1),  # an idle stream
        (_Peer.preface() + (RECEIVE_FRAME_SIZE + 1).to_bytes(3, "big") + bytes(6), 0x6),
    ],
)
@pytest.mark.parametrize("cut", ["whole", "bytes"])
def test_connection_errors(data: bytes, code: int, cut: str) -> None:
    """GOAWAY naming the error, then our FIN; what the peer still sends is read and dropped
    for a while (closing with unread bytes would reset the connection and could destroy the
    GOAWAY), then the socket closes."""
    peer = _Peer(_App())
    peer.feed(data, _cuts(cut))
    (goaway,) = peer.sent(GOAWAY)
    assert goaway[1][4:8] == code.to_bytes(4, "big")
    assert peer.transport.eof and not peer.transport.closed
    peer.feed(bytes(100_000))  # read and dropped
    assert len(peer.sent(GOAWAY)) == 1
    peer.loop.advance(LINGER_S)
    assert peer.transport.closed


def test_data_interrupting_a_header_block_is_a_connection_error() -> None:
    peer = _Peer(_App())
    block = peer.encoder.encode([(b":method", b"POST"), (b":path", b"/s/m")])
    peer.feed(peer.preface() + frame(HEADERS, 0, 1, block) + frame(DATA, 0, 1, _message(3)))
    (goaway,) = peer.sent(GOAWAY)
    assert goaway[1][4:8] == (0x1).to_bytes(4, "big")


@pytest.mark.parametrize("kind", ["memoryview", "bytearray", "bytes"])
def test_a_message_read_into_place_decodes_into_read_only_views(kind: str) -> None:
    """The gRPC server hands the codec the writable buffer the body was read into: the
    tensors of both the full decode and the fast path (the second request) are read-only,
    and the fast path's are views of that buffer."""
    values = np.arange(1000 + len(kind), dtype=np.float32)  # a layout of its own per case
    message = pb.ModelInferRequest(
        model_name="m",
        inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, values.size]}],
        raw_input_contents=[values.tobytes()],
    ).SerializeToString()
    for attempt in range(2):
        peer = _Peer(_App())
        body = b"\0" + len(message).to_bytes(4, "big") + message
        peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, body, 999)))
        received = peer.app.messages[1]
        assert isinstance(received, memoryview) and not received.readonly
        data: dict[str, bytes | bytearray | memoryview] = {
            "memoryview": received,
            "bytearray": bytearray(received),
            "bytes": bytes(received),
        }
        request = decode_infer_request_bytes(data[kind])
        (array,) = (tensor.data for tensor in request.inputs)
        np.testing.assert_array_equal(array.ravel(), values)
        assert not array.flags.writeable
        if attempt and kind == "memoryview":
            assert np.shares_memory(array, np.frombuffer(received, np.uint8))


# ---------------------------------------------------------------------- timers and budgets
#
# The connection's clock is the test's (_Clock): timeouts are checked without waiting.


def test_no_preface_in_time_closes_the_connection() -> None:
    counters = Http2Counters()
    peer = _Peer(_App(), limits=Http2Limits(preface_timeout_s=10), counters=counters)
    peer.feed(PREFACE[:10])
    peer.loop.advance(9.9)
    assert not peer.sent(GOAWAY)
    peer.loop.advance(0.2)
    (goaway,) = peer.sent(GOAWAY)
    assert goaway[1][4:8] == bytes(4)  # NO_ERROR
    assert peer.transport.eof and counters.exceeded["preface_timeout"] == 1


def test_a_request_whose_body_stopped_does_not_keep_a_connection() -> None:
    """Idle: nothing being worked on and nothing read; a stream waiting for the rest of a
    body the peer stopped sending holds its buffer no longer than that."""
    counters = Http2Counters()
    peer = _Peer(_App(), limits=Http2Limits(idle_timeout_s=60), counters=counters)
    peer.feed(peer.preface() + peer.headers(1) + _data_frames(1, _message(100_000), 1000)[0])
    assert counters.buffered == 100_000
    peer.loop.advance(59)
    peer.feed(frame(PING, 0, 0, bytes(8)))  # something read: the idle time starts again
    peer.loop.advance(59)
    assert not peer.sent(GOAWAY)
    peer.loop.advance(62)
    assert peer.sent(GOAWAY) and peer.app.resets == [1]
    assert counters.buffered == 0 and counters.exceeded["idle_timeout"] == 1


def test_a_call_being_answered_is_not_idle() -> None:
    peer = _Peer(_App(), limits=Http2Limits(idle_timeout_s=60))
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(10), 100)))
    assert peer.app.bodies
    peer.loop.advance(600)  # the application takes its time
    assert not peer.sent(GOAWAY)
    stream = peer.connection.streams[1]
    peer.connection.respond(stream, literal_header_block([(b":status", b"200")]), b"", b"ok", b"")
    peer.loop.advance(61)
    assert peer.sent(GOAWAY)


@pytest.mark.parametrize("size", [10, 100_000])  # sent whole at once; as the windows open
def test_a_response_is_its_head_prefix_body_and_trailers(size: int) -> None:
    peer = _Peer(_App())
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(10), 100)))
    head, trailers = literal_header_block([(b":status", b"200")]), b"\x40\x01a\x01b"
    body = random.Random(1).randbytes(size)
    peer.connection.respond(peer.connection.streams[1], head, b"\x00pre", body, trailers)
    while peer.connection.streams:  # the client opens the windows until all is out
        more = (1 << 20).to_bytes(4, "big")
        peer.feed(frame(WINDOW_UPDATE, 0, 0, more) + frame(WINDOW_UPDATE, 0, 1, more))
    sent = [(k, f, p) for k, f, s, p in peer.frames() if s == 1]
    assert sent[0] == (HEADERS, END_HEADERS, head)
    assert b"".join(p for k, _, p in sent if k == DATA) == b"\x00pre" + body
    assert sent[-1] == (HEADERS, END_HEADERS | END_STREAM, trailers)


def test_a_response_stalled_on_a_closed_window_is_dropped() -> None:
    counters = Http2Counters()
    peer = _Peer(_App(), limits=Http2Limits(send_timeout_s=30), counters=counters)
    peer.feed(peer.preface() + peer.headers(1) + b"".join(_data_frames(1, _message(10), 100)))
    stream = peer.connection.streams[1]
    head = literal_header_block([(b":status", b"200")])
    peer.connection.respond(stream, head, b"", bytes(200_000), b"")  # 64 KiB - 1 go out
    assert stream.outbox is not None
    peer.loop.advance(20)
    peer.feed(frame(WINDOW_UPDATE, 0, 0, (10).to_bytes(4, "big")))  # the connection's only
    peer.feed(frame(WINDOW_UPDATE, 0, 1, (10).to_bytes(4, "big")))  # 10 bytes: progress
    peer.loop.advance(29)
    assert 1 in peer.connection.streams
    peer.loop.advance(2)
    assert peer.sent(RST_STREAM)[-1] == (1, (0x8).to_bytes(4, "big"))  # CANCEL
    assert stream.outbox is None or not peer.connection.streams
    assert counters.exceeded["send_timeout"] == 1 and not peer.sent(GOAWAY)


def test_keepalive_pings_a_silent_peer_and_closes_if_it_stays_silent() -> None:
    limits = Http2Limits(keepalive_s=100, keepalive_timeout_s=20)
    peer = _Peer(_App(), limits=limits)
    peer.feed(peer.preface())
    peer.loop.advance(101)
    (ping,) = [p for k, _, _, p in peer.frames() if k == PING]
    peer.feed(frame(PING, 1, 0, ping))  # answered
    peer.loop.advance(99)
    assert not peer.sent(GOAWAY)
    peer.loop.advance(130)  # the next PING unanswered
    assert peer.sent(GOAWAY) and peer.transport.eof


def test_a_flood_of_pings_runs_out_of_its_budget_and_the_budget_refills() -> None:
    limits = Http2Limits(max_control_frames=100, control_frames_per_s=10)
    peer = _Peer(_App(), limits=limits)
    peer.feed(peer.preface() + frame(PING, 0, 0, bytes(8)) * 99)
    peer.loop.advance(5)  # 50 given back
    peer.feed(frame(PING, 0, 0, bytes(8)) * 50)
    assert not peer.sent(GOAWAY)
    peer.feed(frame(PING, 0, 0, bytes(8)) * 5)
    (goaway,) = peer.sent(GOAWAY)
    assert goaway[1][4:8] == (0xB).to_bytes(4, "big")  # ENHANCE_YOUR_CALM


def test_answered_streams_give_back_the_reset_budget() -> None:
    """A client that resets some calls but has most answered is never told to calm down."""
    peer = _Peer(_App(), limits=Http2Limits(max_resets=10, resets_per_s=0))
    peer.feed(peer.preface())
    head = literal_header_block([(b":status", b"200")])
    for n in range(100):
        sid = 4 * n + 1
        peer.feed(peer.headers(sid) + b"".join(_data_frames(sid, _message(10), 100)))
        peer.connection.respond(peer.connection.streams[sid], head, b"", b"ok", b"")
        peer.feed(peer.headers(sid + 2) + frame(RST_STREAM, 0, sid + 2, (8).to_bytes(4, "big")))
    assert not peer.sent(GOAWAY)
    for n in range(11):
        sid = 401 + 2 * n
        peer.feed(peer.headers(sid) + frame(RST_STREAM, 0, sid, (8).to_bytes(4, "big")))
    assert peer.sent(GOAWAY)


def test_data_past_a_window_is_a_flow_control_error() -> None:
    peer = _Peer(_App(announce=False))
    peer.feed(peer.preface() + peer.headers(1) + frame(DATA, 0, 1, bytes(1 << 20)))
    peer.feed(frame(DATA, 0, 1, b"x"))  # one byte past the stream's window
    assert peer.sent(RST_STREAM) == [(1, (0x3).to_bytes(4, "big"))]


def test_answers_of_one_turn_leave_in_one_send_and_a_lone_answer_at_once() -> None:
    """A batch ends several calls of a connection in one turn of the loop: their answers are
    held until the turn ends and go out in one send, in order; a connection with one call
    open sends its answer at once; a GOAWAY of a connection error goes after what was held."""
    peer = _Peer(_App())
    head = literal_header_block([(b":status", b"200")])
    peer.feed(peer.preface())
    for sid in (1, 3, 5):
        peer.feed(peer.headers(sid) + b"".join(_data_frames(sid, _message(10), 100)))
    sends = peer.transport.sends
    for sid in (1, 3):
        peer.connection.respond(peer.connection.streams[sid], head, b"", b"ok", b"")
    assert peer.transport.sends == sends  # held: other calls are open
    peer.loop.turn()
    assert peer.transport.sends == sends + 1
    assert [s for k, _, s, _ in peer.frames() if k == DATA] == [1, 3]
    peer.connection.respond(peer.connection.streams[5], head, b"", b"ok", b"")
    assert peer.transport.sends == sends + 2  # the only open call: sent at once
    peer.feed(peer.headers(7) + b"".join(_data_frames(7, _message(10), 100)))
    peer.feed(peer.headers(9) + b"".join(_data_frames(9, _message(10), 100)))
    peer.connection.respond(peer.connection.streams[7], head, b"", b"ok", b"")
    peer.connection._fail(0x1, "a connection error")  # before the turn ends
    kinds = [(k, s) for k, _, s, _ in peer.frames()]
    assert kinds[-2:] == [(HEADERS, 7), (GOAWAY, 0)] and peer.transport.eof


# A transport closed (by the server, or aborted by the send timeout) stays open a moment,
# until the loop calls connection_lost: no timer of the connection may write meanwhile
# (scripts/fuzz_http2.py found an idle timeout's GOAWAY written after the close).


def test_no_timer_writes_after_the_server_closes_a_connection() -> None:
    peer = _Peer(_App(), limits=Http2Limits(idle_timeout_s=30, keepalive_s=20))
    peer.feed(peer.preface())
    peer.connection.close()
    assert peer.transport.closed
    peer.loop.advance(1000)  # idle and keepalive were due: the transport is not written
    assert not [t for t in peer.loop.timers if not t.cancelled]


def test_no_timer_writes_after_the_send_timeout_aborts_a_connection() -> None:
    """The fuzz input BQMxHAMxHBwcHBwcMBwcHA==: writing paused, the send timeout aborts the
    connection, the transport's writing toggles again, the idle timeout comes due."""
    counters = Http2Counters()
    limits = Http2Limits(idle_timeout_s=30, send_timeout_s=15)
    peer = _Peer(_App(), limits=limits, counters=counters)
    peer.feed(peer.preface())
    peer.connection.pause_writing()
    peer.loop.advance(28)
    assert peer.transport.closed and counters.exceeded["send_timeout"] == 1
    peer.connection.pause_writing()
    peer.connection.resume_writing()
    peer.loop.advance(1000)
    assert not [t for t in peer.loop.timers if not t.cancelled]
    assert counters.exceeded["idle_timeout"] == 0
