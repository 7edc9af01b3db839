"""Coverage-guided fuzzing (atheris) of the gRPC port's HTTP/2 connection class.

    .venv/bin/python scripts/fuzz_http2.py -max_total_time=600 [CORPUS_DIR ...]

Each input drives one ``Http2Connection`` (transport/http2.py) over a fake transport and a
clock the harness moves: the input is a program of raw reads (cut anywhere), frames of any
type, flags and stream (valid header blocks among them, so requests get far), gRPC-like
bodies, clock jumps (every timer: preface, idle, keepalive, age, send), application answers,
write pauses and a disconnect. Invariants, after every step and at the end:

- no exception escapes the protocol;
- buffers stay bounded: request bytes held per connection (reservations within the limit,
  plus the open streams' initial windows) and server-wide within their limits (never
  negative), the read buffer within one frame, streams within the limit; a stream waits for
  room only while its connection reserves some (flow control cannot deadlock);
- what the connection wrote is whole frames, and nothing follows a connection error's GOAWAY;
- every connection ends: once the input is over, the application has answered what it got
  and the clock runs far ahead, the transport is closed (GOAWAY, FIN, linger, close) and,
  once lost, every byte it held is given back.

Arguments are libFuzzer's (``-runs=N``, ``-max_total_time=S``, ``-seed=N``, corpus folders);
without a corpus folder a temporary one is seeded. tests/unit/transport/test_fuzz_connections.py
runs a bounded pass.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["inferplex.transport"]):
    import hpack

    from inferplex.transport.http2 import READ_BUFFER, RECEIVE_FRAME_SIZE, Http2Connection
    from inferplex.transport.http2_flow import initial_stream_window
    from inferplex.transport.http2_limits import Http2Counters, Http2Limits
    from inferplex.transport.http2_stream import Stream
    from inferplex.transport.http2_wire import PREFACE, frame, literal_header_block
    from inferplex.transport.http_limits import ByteBudget

MAX_BODY = 1 << 17
MAX_BLOCK = 4096
LIMITS = Http2Limits(
    max_concurrent_streams=8,
    max_header_frames=4,
    max_resets=20,
    resets_per_s=1.0,
    max_control_frames=50,
    control_frames_per_s=5.0,
    preface_timeout_s=10.0,
    idle_timeout_s=30.0,
    keepalive_s=20.0,
    keepalive_timeout_s=5.0,
    max_connection_age_s=0.0,
    send_timeout_s=15.0,
    connection_buffer_bytes=1 << 16,
)
AGED = Http2Limits(max_connection_age_s=50.0, max_connection_age_grace_s=10.0, idle_timeout_s=30)
SERVER_BYTES = 1 << 18
_OK = literal_header_block([(b":status", b"200")])


class _Timer:
    def __init__(self, at: float, callback: Callable[[], object]) -> None:
        self.at, self.callback, self.cancelled = at, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class Clock:
    """The parts of an event loop a connection uses, on a clock the harness moves."""

    def __init__(self) -> None:
        self.now = 0.0
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
        end = self.now + seconds
        for _ in range(10_000):  # bounded: a timer that re-arms at once is a bug
            due = [t for t in self.timers if not t.cancelled and t.at <= end]
            if not due:
                break
            timer = min(due, key=lambda t: t.at)
            self.timers.remove(timer)
            self.now = max(self.now, timer.at)
            timer.callback()
            self.turn()
        else:
            raise AssertionError("timers keep firing")
        self.now = end


class Transport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = self.eof = self.paused = False

    def write(self, data: bytes) -> None:
        assert not self.closed and not self.eof, "written after the close or FIN"
        self.written += data

    def writelines(self, data: list[bytes]) -> None:
        for piece in data:
            self.write(piece)

    def close(self) -> None:
        self.closed = True

    abort = close

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class App:
    """A gRPC-like application: asks for a 5-byte head, sizes the rest from it, answers
    when the harness says (or at the end)."""

    def __init__(self) -> None:
        self.ready: list[Stream] = []  # bodies received, not answered yet

    def headers_received(self, connection: Http2Connection, stream: Stream) -> None:
        if stream.id % 7 == 3:  # some are answered at once
            connection.respond_headers_only(stream, _OK)
        else:
            stream.head_size = 5

    def body_head_received(
        self, connection: Http2Connection, stream: Stream, head: bytes
    ) -> int | None:
        length = int.from_bytes(head[1:5], "big")
        if length > MAX_BODY:
            self.body_too_large(connection, stream)
            return None
        return length if head[0] != 0x7F else None

    def body_received(self, connection: Http2Connection, stream: Stream) -> None:
        stream.data(len(stream.head))
        self.ready.append(stream)

    def data_received(self, connection: Http2Connection, stream: Stream) -> None:
        pass  # (no streaming calls here)

    def drained(self, connection: Http2Connection, stream: Stream) -> None:
        pass

    def body_too_large(self, connection: Http2Connection, stream: Stream) -> None:
        connection.respond_headers_only(stream, _OK)

    def buffers_full(self, connection: Http2Connection, stream: Stream, server_wide: bool) -> None:
        connection.respond_headers_only(stream, _OK)

    def stream_reset(self, stream: Stream) -> None:
        if stream in self.ready:
            self.ready.remove(stream)

    def answer(self, connection: Http2Connection, size: int) -> None:
        if self.ready:
            stream = self.ready.pop(0)
            if size % 3:
                connection.respond(stream, _OK, b"", bytes(size), _OK)
            else:
                connection.respond_headers_only(stream, _OK)


def feed(connection: Http2Connection, transport: Transport, data: bytes, cut: int) -> None:
    """Deliver ``data`` as reads of at most ``cut`` bytes (0: as large as offered)."""
    view = memoryview(data)
    while view and not transport.paused and not transport.closed:
        buffer = connection.get_buffer(-1)
        assert len(buffer) > 0
        count = min(len(buffer), len(view), cut or len(view))
        buffer[:count] = view[:count]
        view = view[count:]
        connection.buffer_updated(count)


def frames_of(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out = []
    offset = 0
    while offset < len(data):
        assert len(data) - offset >= 9, "a partial frame header was written"
        length = int.from_bytes(data[offset : offset + 3], "big")
        end = offset + 9 + length
        assert end <= len(data), "a partial frame was written"
        stream = int.from_bytes(data[offset + 5 : offset + 9], "big")
        out.append((data[offset + 3], data[offset + 4], stream, data[offset + 9 : end]))
        offset = end
    return out


def check(connection: Http2Connection, counters: Http2Counters, limits: Http2Limits) -> None:
    budget = counters.budget
    # bodies being received, and the calls' handed-over bodies and unsent answers (an answer
    # is charged as it is: it may take the budget past its limit, refusing new bodies)
    assert 0 <= budget.used <= budget.limit + connection.flow.unsent, budget.used
    charged = sum(s.charged for s in connection.streams.values())
    assert counters.buffered >= 0 and counters.buffered + charged == budget.used
    flow = connection.flow
    held = flow.held
    # reservations within the limit (one message alone may pass it), plus initial windows
    window = initial_stream_window(limits)
    bound = (
        max(limits.connection_buffer_bytes, 2 * MAX_BODY) + limits.max_concurrent_streams * window
    )
    assert 0 <= held <= bound, held
    assert held == sum(s.held for s in connection.streams.values()), "held bytes not all counted"
    reserved = flow.reserved
    assert reserved == sum(s.reserved for s in connection.streams.values()), "reservations"
    # a stream waits for room only while the connection reserves some (which will end)
    assert not flow.waiting or reserved, "a stream waits on nothing"
    assert all(connection.streams.get(i) is s for i, (s, _) in flow.waiting.items())
    assert len(connection._view) <= max(READ_BUFFER, RECEIVE_FRAME_SIZE + 9 + 4096)
    assert len(connection.streams) <= limits.max_concurrent_streams
    assert flow.recv_window >= 0


@dataclass
class Run:
    """One input's connection, what it talks to, and the program's state."""

    fdp: atheris.FuzzedDataProvider
    limits: Http2Limits
    counters: Http2Counters
    clock: Clock
    transport: Transport
    app: App
    connection: Http2Connection
    encoder: hpack.Encoder
    next_id: int = 1
    lost: bool = False

    def feed(self, data: bytes, cut: int) -> None:
        feed(self.connection, self.transport, data, cut)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    options = fdp.ConsumeIntInRange(0, 7)
    run = _start(fdp, AGED if options & 1 else LIMITS)
    if not options & 2:
        run.feed(PREFACE + frame(4, 0, 0), 0)
    for _ in range(200):
        if not fdp.remaining_bytes() or run.lost:
            break
        op = fdp.ConsumeIntInRange(0, 10)
        cut = fdp.ConsumeIntInRange(0, 20)
        _OPS[op](run, cut)
        run.clock.turn()
        check(run.connection, run.counters, run.limits)
    _finish(run)


def _start(fdp: atheris.FuzzedDataProvider, limits: Http2Limits) -> Run:
    counters = Http2Counters(ByteBudget(SERVER_BYTES))
    clock, transport, app = Clock(), Transport(), App()
    connection = Http2Connection(
        app,
        set(),
        max_body_bytes=MAX_BODY + 5,
        max_header_block_bytes=MAX_BLOCK,
        limits=limits,
        counters=counters,
        loop=clock,  # type: ignore[arg-type]
    )
    connection.connection_made(transport)  # type: ignore[arg-type]
    return Run(fdp, limits, counters, clock, transport, app, connection, hpack.Encoder())


def _raw_bytes(run: Run, cut: int) -> None:
    fdp = run.fdp
    run.feed(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 300)), cut)


def _any_frame(run: Run, cut: int) -> None:
    fdp, next_id = run.fdp, run.next_id
    kind = fdp.ConsumeIntInRange(0, 11)
    flags = fdp.ConsumeIntInRange(0, 255)
    stream = fdp.PickValueInList([0, 1, 2, 3, 5, 7, next_id, next_id - 2, 2**31 - 1])
    payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
    run.feed(frame(kind, flags, max(stream, 0), payload), cut)


def _request(run: Run, cut: int) -> None:
    """A request's header block, maybe cut into CONTINUATIONs."""
    fdp = run.fdp
    fields = [(":method", "POST"), (":scheme", "http"), (":path", "/s/m")]
    if fdp.ConsumeBool():
        fields.append(
            ("x-" + fdp.ConsumeUnicodeNoSurrogates(4), fdp.ConsumeUnicodeNoSurrogates(20))
        )
    block = run.encoder.encode(fields)
    flags = fdp.ConsumeIntInRange(0, 1)  # END_STREAM
    pieces = fdp.ConsumeIntInRange(1, 6)
    size = max(1, len(block) // pieces)
    chunks = [block[i : i + size] for i in range(0, len(block), size)]
    out = frame(1, flags | (4 if len(chunks) == 1 else 0), run.next_id, chunks[0])
    for n, chunk in enumerate(chunks[1:], 2):
        out += frame(9, 4 if n == len(chunks) else 0, run.next_id, chunk)
    run.feed(out, cut)
    run.next_id += 2


def _body(run: Run, cut: int) -> None:
    """A gRPC-like body, maybe announcing more or less than it sends."""
    fdp, next_id = run.fdp, run.next_id
    stream = fdp.PickValueInList([next_id - 2, next_id - 4, 1])
    announced = fdp.ConsumeIntInRange(0, MAX_BODY + 10)
    sent = min(fdp.ConsumeIntInRange(0, 70_000), announced + 100)
    body = b"\0" + announced.to_bytes(4, "big") + bytes(sent)
    step = fdp.ConsumeIntInRange(1, 20_000)
    out = b"".join(
        frame(0, 0, max(stream, 1), body[i : i + step]) for i in range(0, len(body), step)
    )
    if fdp.ConsumeBool():
        out += frame(0, 1, max(stream, 1))
    run.feed(out, cut)


def _time_passes(run: Run, cut: int) -> None:
    run.clock.advance(run.fdp.ConsumeIntInRange(0, 40))


def _answer(run: Run, cut: int) -> None:
    """One to three answers in one turn of the loop (a batch ends several calls at once)."""
    for _ in range(run.fdp.ConsumeIntInRange(1, 3)):
        run.app.answer(run.connection, run.fdp.ConsumeIntInRange(0, 200_000))


def _toggle_writing(run: Run, cut: int) -> None:
    if run.fdp.ConsumeBool():
        run.connection.pause_writing()
    else:
        run.connection.resume_writing()


def _window_update(run: Run, cut: int) -> None:
    increment = run.fdp.ConsumeIntInRange(0, 2**31 - 1)
    stream = run.fdp.PickValueInList([0, run.next_id - 2])
    run.feed(frame(8, 0, max(stream, 0), increment.to_bytes(4, "big")), cut)


def _initial_window(run: Run, cut: int) -> None:
    run.feed(frame(4, 0, 0, bytes([0, 4]) + run.fdp.ConsumeBytes(4)), cut)


def _reset(run: Run, cut: int) -> None:
    run.feed(frame(3, 0, max(run.next_id - 2, 1), bytes(4)), cut)


def _disconnect(run: Run, cut: int) -> None:
    run.connection.connection_lost(None)
    run.lost = True


#: the program's operations, by number
_OPS: tuple[Callable[[Run, int], None], ...] = (
    _raw_bytes,
    _any_frame,
    _request,
    _body,
    _time_passes,
    _answer,
    _toggle_writing,
    _window_update,
    _initial_window,
    _reset,
    _disconnect,
)


def _finish(run: Run) -> None:
    """The end: everything received is answered, the client reads, time passes."""
    connection = run.connection
    if not run.lost:
        connection.resume_writing()
        for _ in range(50):
            run.app.answer(connection, 10)
        run.clock.turn()
        run.clock.advance(10_000)
        assert run.transport.closed, "the connection was never closed"
        connection.connection_lost(None)
    check(connection, run.counters, run.limits)
    assert run.counters.budget.used == 0 and not connection.streams
    written = frames_of(bytes(run.transport.written))
    errors = [i for i, f in enumerate(written) if f[0] == 7 and f[3][4:8] != bytes(4)]
    if errors:
        assert errors[0] == len(written) - 1, "frames written after a connection error's GOAWAY"


_SEEDS = (
    b"\x00\x02\x05",
    b"\x00\x02\x00\x00\x03\x03\x01\x00\x05\x04\x00\x28",
    b"\x01\x02\x03\x01\x02\x03\x00\x00\x05\x10\x04\x00\x40",
    b"\x00\x01\x02\x06\x00\x00\x01\x00\x08\x00\x00\x00\x00",
    b"\x02\x00\x05\x50\x52\x49\x20\x2a",
    # found: the send timeout aborts, then the idle timeout wrote its GOAWAY after the close
    b"\x05\x03\x31\x1c\x03\x31\x1c\x1c\x1c\x1c\x1c\x1c\x30\x1c\x1c\x1c",
)


def main(argv: list[str]) -> None:
    args = list(argv)
    if not any(not a.startswith("-") for a in args[1:]):
        corpus = Path(tempfile.mkdtemp(prefix="fuzz_http2_"))
        for n, seed in enumerate(_SEEDS):
            (corpus / f"seed{n}").write_bytes(seed)
        args.append(str(corpus))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
