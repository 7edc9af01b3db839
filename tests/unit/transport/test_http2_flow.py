"""Flow control of the built-in HTTP/2 server is deadlock-free (the invariants in
transport/http2.py's docstring), and the budget of frames that do no work lets honest
bursts through: a connection driven by a client that keeps to the windows it is granted."""

from __future__ import annotations

import random

import pytest

from inferplex.transport.http2_flow import (
    CONNECTION_WINDOW,
    MIN_STREAM_WINDOW,
    STREAM_WINDOW,
    initial_stream_window,
)
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_wire import (
    ACK,
    DATA,
    DEFAULT_WINDOW,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PING,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)
from inferplex.transport.http_limits import ByteBudget
from tests.unit.transport.test_http2 import _App, _message, _Peer


class _Client:
    """Sends bodies on several streams at once as a well-behaved client does: DATA frames of
    at most ``frame_size``, only within the stream's and the connection's windows, streams
    taken in a random order; it reads the server's WINDOW_UPDATEs, SETTINGS and answers
    after every frame."""

    def __init__(self, peer: _Peer, frame_size: int, seed: int = 0) -> None:
        self.peer = peer
        self.frame_size = frame_size
        self.rng = random.Random(seed)
        self.read = 0  # frames of the server's read so far
        self.connection_window = DEFAULT_WINDOW
        self.initial = DEFAULT_WINDOW
        self.windows: dict[int, int] = {}
        self.left: dict[int, memoryview] = {}
        self.ended: set[int] = set()  # answered or reset by the server
        peer.feed(peer.preface() + frame(SETTINGS, ACK, 0))
        self._read()

    def start(self, stream_id: int, body: bytes) -> None:
        self.peer.feed(self.peer.headers(stream_id))
        self.windows[stream_id] = self.initial
        self.left[stream_id] = memoryview(body)

    def _read(self) -> None:
        frames = self.peer.frames()
        for kind, flags, stream_id, payload in frames[self.read :]:
            if kind == SETTINGS and not flags & ACK:
                for i in range(0, len(payload), 6):
                    if int.from_bytes(payload[i : i + 2], "big") == INITIAL_WINDOW_SIZE:
                        self.initial = int.from_bytes(payload[i + 2 : i + 6], "big")
            elif kind == WINDOW_UPDATE:
                increment = int.from_bytes(payload, "big")
                if stream_id == 0:
                    self.connection_window += increment
                elif stream_id in self.windows:
                    self.windows[stream_id] += increment
            elif kind == RST_STREAM or (kind == HEADERS and flags & END_STREAM):
                self.ended.add(stream_id)
            assert kind != GOAWAY, payload
        self.read = len(frames)

    def run(self, check: object = None) -> set[int]:
        """Send until no stream can; the streams stuck with data left (none: no deadlock)."""
        while True:
            ready = [
                sid
                for sid, left in self.left.items()
                if left and sid not in self.ended and self.windows[sid] > 0
            ]
            if not ready or self.connection_window <= 0:
                break
            sid = self.rng.choice(ready)
            left = self.left[sid]
            size = min(len(left), self.frame_size, self.windows[sid], self.connection_window)
            flags = END_STREAM if size == len(left) else 0
            self.peer.feed(frame(DATA, flags, sid, bytes(left[:size])))
            self.left[sid] = left[size:]
            self.windows[sid] -= size
            self.connection_window -= size
            self._read()
            if callable(check):
                check()
        return {sid for sid, left in self.left.items() if left and sid not in self.ended}


def _charged(peer: _Peer) -> int:
    """The bytes of bodies handed over whose calls are not answered yet: they stay in the
    server's budget until their calls end."""
    return sum(stream.charged for stream in peer.connection.streams.values())


def _held_bound(peer: _Peer, largest: int) -> None:
    """What a connection holds: its reservations within the limit (or one message alone),
    plus what its open streams sent in their initial windows."""
    connection = peer.connection
    limits = connection._limits
    window = initial_stream_window(limits)
    assert connection.flow.reserved <= max(limits.connection_buffer_bytes, largest)
    assert connection.flow.held <= connection.flow.reserved + window * len(connection.streams)
    assert connection.flow.held == sum(s.held for s in connection.streams.values())
    assert connection.flow.recv_window >= 0


@pytest.mark.parametrize("frame_size", [16_384, 1 << 20])
def test_concurrent_messages_larger_than_the_windows_all_arrive(frame_size: int) -> None:
    """Issue 30: two 32 MiB calls on one connection never finished (the second got no
    WINDOW_UPDATE, RST or GOAWAY). Here 4 messages of 3 MiB against a 4 MiB connection
    limit: one has room at a time, the others wait for it, held back by their own windows;
    all arrive, each into a buffer sized for it."""
    counters = Http2Counters()
    peer = _Peer(_App(), limits=Http2Limits(connection_buffer_bytes=4 << 20), counters=counters)
    client = _Client(peer, frame_size)
    assert client.initial == MIN_STREAM_WINDOW
    bodies = {sid: _message(3 << 20, sid) for sid in (1, 3, 5, 7)}
    for sid, body in bodies.items():
        client.start(sid, body)
    assert client.run(lambda: _held_bound(peer, 3 << 20)) == set()
    assert peer.app.bodies == bodies
    assert peer.app.sized == dict.fromkeys(bodies, True)
    assert peer.app.full == []
    assert counters.buffered == 0  # the bodies stay in the server's budget until answered
    assert counters.budget.used == _charged(peer) == sum(len(b) - 5 for b in bodies.values())
    assert counters.exceeded["connection_buffer_waits"] >= 1


def test_a_waiting_stream_is_held_back_by_its_own_window_only() -> None:
    """While a message waits for room its stream gets no WINDOW_UPDATE, and what it sent in
    its initial window is given back to the connection window (invariant 1): a stream with
    room is never held back by one waiting."""
    peer = _Peer(_App(), limits=Http2Limits(connection_buffer_bytes=1 << 20))
    client = _Client(peer, 16_384)
    one, three = _message(1 << 20, 1), _message(1 << 20, 3)
    client.start(1, one)
    client.start(3, three)
    client.left[1] = client.left[1][:0]  # 1 sends nothing yet: it holds its room
    peer.feed(frame(DATA, 0, 1, one[:5]))
    client._read()
    client.left[1] = memoryview(one[5:])
    client.windows[1] -= 5
    client.connection_window -= 5
    blocked = dict(client.left)
    client.left = {3: blocked[3]}
    client.run()  # 3 sends its initial window and stops
    assert len(blocked[3]) - len(client.left[3]) == client.initial
    assert 3 not in [sid for sid, _ in peer.sent(WINDOW_UPDATE)]
    assert peer.connection.streams[3].held == client.initial - 5  # kept (all but the head), counted
    client.left[1] = blocked[1]
    assert client.run() == set()  # 1 ends, 3 gets room, its window opens, it ends
    assert peer.app.bodies == {1: one, 3: three}
    assert peer.app.sized == {1: True, 3: True}


def test_a_long_body_opens_its_window_once_for_all_of_it() -> None:
    peer = _Peer(_App(), limits=Http2Limits())
    client = _Client(peer, 16_384)
    body = _message(STREAM_WINDOW * 3)
    client.start(1, body)
    assert client.run() == set()
    assert peer.app.bodies == {1: body}
    updates = peer.sent(WINDOW_UPDATE)
    assert updates[0] == (0, (CONNECTION_WINDOW - 65_535).to_bytes(4, "big"))  # the preface's
    stream_updates = [int.from_bytes(p, "big") for sid, p in updates if sid == 1]
    assert sum(stream_updates) == len(body) - client.initial and len(stream_updates) == 1


def test_a_message_larger_than_the_server_budget_is_refused_alone() -> None:
    """It can never fit: refused at once on its stream (server-wide: RESOURCE_EXHAUSTED
    naming the budget, from the application); the connection's other streams go on."""
    counters = Http2Counters(ByteBudget(1 << 20))
    peer = _Peer(_App(), counters=counters)
    client = _Client(peer, 16_384)
    small = _message(300_000, 3)
    client.start(1, _message(2 << 20, 1))
    client.start(3, small)
    assert client.run() == set()
    assert peer.app.full == [(1, True)] and peer.app.bodies == {3: small}
    assert counters.buffered == 0


def test_a_stream_waits_only_on_its_own_connection() -> None:
    """The server-wide budget is held by another connection and this one reserves nothing:
    nothing of its own would make room, so the message is refused, not left waiting."""
    budget = ByteBudget(1 << 20)
    other = _Peer(_App(), counters=Http2Counters(budget))
    other.feed(other.preface() + other.headers(1))
    other.feed(frame(DATA, 0, 1, _message(900_000, 1)[:100]))  # the head, then nothing
    assert budget.used == 900_000
    peer = _Peer(_App(), counters=Http2Counters(budget))
    client = _Client(peer, 16_384)
    client.start(1, _message(500_000, 2))
    assert client.run() == set()
    assert peer.app.full == [(1, True)]


@pytest.mark.parametrize("seed", range(40))
def test_any_mix_of_concurrent_messages_ends_without_a_deadlock(seed: int) -> None:
    """Random limits, message sizes, frame sizes and interleavings: every stream of a
    well-behaved client ends (its body arrives, or it is refused for room it can never
    have), no stream is left waiting, and every byte held is given back."""
    rng = random.Random(seed)
    budget = ByteBudget(rng.choice([0, 1 << 20, 4 << 20, 16 << 20]))
    limits = Http2Limits(
        connection_buffer_bytes=rng.choice([64 << 10, 256 << 10, 1 << 20, 4 << 20]),
        max_concurrent_streams=rng.choice([4, 16, 1024]),
    )
    counters = Http2Counters(budget)
    peer = _Peer(_App(), limits=limits, counters=counters)
    client = _Client(peer, rng.choice([100, 16_384, 65_536, 1 << 20]), seed)
    count = rng.randint(
        1, limits.max_concurrent_streams if limits.max_concurrent_streams < 16 else 12
    )
    bodies = {
        2 * i + 1: _message(rng.choice([0, 10, 70_000, 300_000, 2 << 20]), i) for i in range(count)
    }
    for sid, body in bodies.items():
        client.start(sid, body)
    largest = max(map(len, bodies.values()))
    assert client.run(lambda: _held_bound(peer, largest)) == set()
    refused = {sid for sid, _ in peer.app.full}
    assert set(peer.app.bodies) | refused == set(bodies)
    assert budget.limit or not refused  # only the server-wide budget refuses a message
    assert all(peer.app.bodies[sid] == bodies[sid] for sid in peer.app.bodies)
    assert counters.buffered == 0 and budget.used == _charged(peer)
    assert not peer.connection.flow.waiting


# -- frames that do no work: honest bursts pass, floods do not -----------------------------------


def test_a_burst_of_streams_with_their_window_updates_is_not_a_flood() -> None:
    """Issue 30: 1,500 calls of one grpc-core channel (HEADERS, then a WINDOW_UPDATE for the
    response's window, per call, before any answer) got GOAWAY ENHANCE_YOUR_CALM."""
    peer = _Peer(_App(), limits=Http2Limits(max_concurrent_streams=2000, max_control_frames=100))
    peer.feed(peer.preface() + frame(SETTINGS, ACK, 0))
    for sid in range(1, 3000, 2):
        peer.feed(peer.headers(sid) + frame(WINDOW_UPDATE, 0, sid, (4 << 20).to_bytes(4, "big")))
        if sid % 7 == 1:
            peer.feed(frame(WINDOW_UPDATE, 0, 0, (1 << 20).to_bytes(4, "big")))
    assert not peer.sent(GOAWAY)
    assert len(peer.connection.streams) == 1500
    # a flood still is one: the earned room is at most one burst
    peer.feed(frame(PING, 0, 0, bytes(8)) * 250)
    assert peer.sent(GOAWAY)[0][1][4:8] == ENHANCE_YOUR_CALM.to_bytes(4, "big")


def test_streams_past_the_limit_are_refused_not_the_connection() -> None:
    """A burst past max_concurrent_streams before the peer acknowledged our SETTINGS is
    refused stream by stream (REFUSED_STREAM: grpc-core retries) and costs no budget."""
    limits = Http2Limits(max_concurrent_streams=10, max_resets=20)
    peer = _Peer(_App(), limits=limits)
    peer.feed(peer.preface())
    for sid in range(1, 200, 2):
        peer.feed(peer.headers(sid))
    refused = [
        sid for sid, code in peer.sent(RST_STREAM) if code == REFUSED_STREAM.to_bytes(4, "big")
    ]
    assert len(refused) == 90 and not peer.sent(GOAWAY)
    # once acknowledged, the limit is known: going past it again and again is a flood
    peer.feed(frame(SETTINGS, ACK, 0))
    for sid in range(201, 300, 2):
        peer.feed(peer.headers(sid))
    assert peer.sent(GOAWAY)[0][1][4:8] == ENHANCE_YOUR_CALM.to_bytes(4, "big")


def test_a_stream_answered_while_it_waits_leaves_the_queue() -> None:
    """A message waiting for room that is answered first (its deadline passed, say) is not
    given room later: nothing is reserved for a stream that is gone."""
    peer = _Peer(_App(), limits=Http2Limits(connection_buffer_bytes=1 << 20))
    client = _Client(peer, 16_384)
    client.start(1, _message(1 << 20, 1))
    client.start(3, _message(1 << 20, 3))
    peer.feed(
        frame(DATA, 0, 1, _message(1 << 20, 1)[:5]) + frame(DATA, 0, 3, _message(1 << 20, 3)[:5])
    )
    connection = peer.connection
    assert list(connection.flow.waiting) == [3] and connection.streams[3].held == 0
    connection.respond_headers_only(connection.streams[3], b"\x88")
    assert not connection.flow.waiting
    connection.respond_headers_only(connection.streams[1], b"\x88")
    assert connection.flow.reserved == connection.flow.held == 0
