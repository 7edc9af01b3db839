"""The receive side's flow control of an HTTP/2 connection (transport/http2_flow.py), sans
I/O: driven by calls, its frames collected from its sink, no connection, loop or socket."""

from __future__ import annotations

from inferplex.transport.http2_flow import HALF_WINDOW, ReceiveFlow
from inferplex.transport.http2_limits import Http2Counters, Http2Limits
from inferplex.transport.http2_stream import Stream
from inferplex.transport.http_limits import ByteBudget


class _Sinks:
    def __init__(self) -> None:
        self.frames: list[tuple[int, int, int]] = []  # (type, stream, increment)
        self.refused: list[tuple[int, bool]] = []
        self.granted: list[int] = []

    def emit(self, data: bytes) -> None:
        self.frames.append((data[3], int.from_bytes(data[5:9]), int.from_bytes(data[9:13])))

    def refuse(self, stream: Stream, server_wide: bool) -> None:
        self.refused.append((stream.id, server_wide))

    def grant(self, stream: Stream) -> None:
        self.granted.append(stream.id)


def _flow(buffer: int = 1000, server: int = 1 << 20) -> tuple[ReceiveFlow, _Sinks, Http2Counters]:
    sinks = _Sinks()
    counters = Http2Counters(ByteBudget(server))
    limits = Http2Limits(connection_buffer_bytes=buffer, max_concurrent_streams=4)
    flow = ReceiveFlow(limits, counters, sinks.emit, sinks.refuse, sinks.grant)
    return flow, sinks, counters


def _stream(stream_id: int, flow: ReceiveFlow) -> Stream:
    return Stream(stream_id, [], 65535, flow.stream_window)


def test_the_connection_window_is_given_back_in_one_update_once_half_is_owed() -> None:
    flow, sinks, _ = _flow()
    flow.ack(HALF_WINDOW - 1)
    assert not sinks.frames
    flow.ack(1)
    assert sinks.frames == [(8, 0, HALF_WINDOW)] and flow.unacked == 0


def test_a_message_that_does_not_fit_waits_in_order_and_gets_room_as_reservations_end() -> None:
    flow, sinks, counters = _flow(buffer=1000)
    first, second, third = (_stream(i, flow) for i in (1, 3, 5))
    flow.admit(first, 800)
    flow.admit(second, 600)  # past the limit with the first: waits
    flow.admit(third, 100)  # fits, but waits behind the second (in order)
    assert flow.reserved == 800 and list(flow.waiting) == [3, 5]
    assert counters.budget.used == counters.buffered == 800
    flow.release(first)
    assert sinks.granted == [3, 5] and not flow.waiting
    assert second.buffer is not None and len(second.buffer) == 600
    assert flow.reserved == flow.held == 700 and not sinks.refused
    flow.release(second)
    flow.release(third)
    assert flow.held == flow.reserved == counters.budget.used == counters.buffered == 0


def test_room_that_cannot_come_from_the_connection_is_refused_at_once() -> None:
    flow, sinks, counters = _flow(buffer=1000, server=500)
    flow.admit(_stream(1, flow), 600)  # larger than the server-wide budget
    counters.budget.used = 450  # the other connections' bytes
    flow.admit(_stream(3, flow), 100)  # nothing of this connection's to wait for
    assert sinks.refused == [(1, True), (3, True)] and not flow.waiting
    assert counters.exceeded["server_buffer"] == 2


def test_bytes_held_as_they_come_are_refused_past_the_connection_limit() -> None:
    flow, sinks, counters = _flow(buffer=1000)
    one, two = _stream(1, flow), _stream(3, flow)
    assert flow.hold(one, 900) and flow.hold(one, 900)  # one body alone may pass it
    flow.release(one)
    assert flow.hold(one, 600)
    assert not flow.hold(two, 600)
    assert sinks.refused == [(3, False)] and two.discard
    assert counters.exceeded["connection_buffer"] == 1 and flow.held == 600


def test_a_streaming_message_taken_gives_its_window_back() -> None:
    flow, sinks, _ = _flow()
    stream = _stream(1, flow)
    assert flow.hold(stream, 400)
    stream.unsized = 400
    flow.taken(stream, stream.unsized)
    half = flow.stream_window // 2
    assert flow.held == 0 and not sinks.frames  # (less than half the window owed)
    stream.unsized = half
    flow.taken(stream, half)
    assert sinks.frames == [(8, 1, 400 + half)]
