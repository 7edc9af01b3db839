"""Coverage-guided fuzzing (atheris) of the HTTP/1.1 server's connection class.

    .venv/bin/python scripts/fuzz_http1.py -max_total_time=600 [CORPUS_DIR ...]

Each input drives one ``Connection`` (transport/http_connection.py) over a fake transport: the
input is a program of reads (bytes as the socket would deliver them, honouring pauses and the
buffer the protocol offers), padding (so bodies and header blocks can outgrow one read), clock
jumps with a sweep, application progress, write pauses and a disconnect. Invariants checked
after every step and at the end:

- no exception escapes the protocol (nor an asyncio callback);
- buffers stay bounded: the server's ByteBudget never negative nor past what the limits
  allow, the queue, the header block and the body within their limits;
- every connection ends: once its input is over and the clock runs far ahead, it has been
  closed, with a response for each complete request or a refusal; what it wrote parses as
  HTTP/1.1 responses; after the close every byte it held is given back.

Arguments are libFuzzer's (``-runs=N``, ``-max_total_time=S``, ``-seed=N``, corpus folders);
without a corpus folder a temporary one is seeded with valid requests.
tests/unit/transport/test_fuzz_connections.py runs a bounded pass; docs/security.md says how
to run a long one.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris
import httptools

with atheris.instrument_imports(include=["inferplex.transport"]):
    from inferplex.transport.http_connection import Connection
    from inferplex.transport.http_cycle import Request
    from inferplex.transport.http_limits import ByteBudget, Http1Limits
    from inferplex.transport.http_server import HttpServer
    from inferplex.transport.listener import ListenerSpec

_READ = 1 << 16  # the server's read buffer: one read is at most this
_SEEDS = (
    b"\x00GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    b"\x00POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"\x00HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /stream HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00POST /b HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab",
    b"\x00GET /a HTTP/1.0\r\n\r\nGET /fail HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"\x00PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    b"\x00POST /deny HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
    b"\x10POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 150000\r\n\r\n\xff\x05a\x40\xff\x02",
    b"\x20GET /big HTTP/1.1\r\nHost: x\r\n\r\n\xff\x03GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
    b"\x00GET /\xff\x05a\x80\xff\x00 HTTP/1.1\r\nX: \xff\x05b\x80\xff\x01",
    # answers that cannot be written, requests queued behind them, then the client goes
    b"\x00\xff\x03POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\xff\x04",
)
#: tokens the mutator splices in (libFuzzer's -dict)
_TOKENS = (
    b"GET ",
    b"POST ",
    b"HEAD ",
    b" HTTP/1.1\r\n",
    b" HTTP/1.0\r\n",
    b" HTTP/2.0\r\n",
    b"Host: x\r\n",
    b"Content-Length: ",
    b"Transfer-Encoding: chunked\r\n",
    b"\r\n",
    b"\r\n\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"Connection: upgrade\r\nUpgrade: h2c\r\n",
    b"0\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM",
    b"/deny",
    b"/fail",
    b"/stream",
    b"/big",
    b"70000",
    b"\xff\x00",
    b"\xff\x01",
    b"\xff\x02",
    b"\xff\x03",
    b"\xff\x04",
    b"\xff\x05",
)


class FakeTransport:
    """What asyncio's transport does for the protocol, recorded."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.written = bytearray()
        self.closed = False
        self.lost = False
        self.reading = True
        self.eof = False
        self.protocol: Connection | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def get_write_buffer_size(self) -> int:
        return min(len(self.written), 1 << 16)  # what a paused transport would still hold

    def write(self, data: bytes) -> None:
        assert not self.eof, "a write after write_eof"
        if not self.closed:
            self.written += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.call_soon(self.lose)

    def abort(self) -> None:
        self.close()

    def lose(self) -> None:
        if not self.lost and self.protocol is not None:
            self.lost = True
            self.closed = True
            self.protocol.connection_lost(None)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers by path: /fail raises, /stream streams, /big is large, others echo."""
    message = await receive()
    path = scope["path"]
    if path.startswith("/fail"):
        raise RuntimeError("the application failed")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    if path.startswith("/stream"):
        await send({"type": "http.response.body", "body": b"ab", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    body = b"x" * 100_000 if path.startswith("/big") else bytes(message["body"][:64])
    await send({"type": "http.response.body", "body": body})


class Denying:
    """Refuses /deny before its body is read; the ASGI ``app`` answers the rest."""

    def refusal(self, request: Request) -> tuple[int, bytes, list[tuple[bytes, bytes]]] | None:
        if request.path.startswith("/deny"):
            return 403, b'{"error": "no"}', [(b"www-authenticate", b"Bearer")]
        return None

    async def respond(self, request: Request) -> Any:
        raise AssertionError("the ASGI app answers")


class Run:
    """One input's connection, its server and the clock ahead of the loop's."""

    def __init__(self, loop: asyncio.AbstractEventLoop, options: int) -> None:
        self.loop = loop
        self.max_header = (256, 4096, 65536)[options % 3]
        self.max_body = (1000, 200_000)[(options >> 2) & 1]
        budget = ByteBudget((0, 150_000, 10**9)[(options >> 3) % 3])
        limits = Http1Limits(
            header_timeout_s=1.0,
            body_timeout_s=1.0,
            body_min_rate=(0, 1000)[(options >> 5) & 1],
            connection_buffer_bytes=(0, 100_000)[(options >> 6) & 1],
            keep_alive_s=1.0,
            send_timeout_s=1.0,
        )
        self.server = HttpServer(
            Denying() if (options >> 7) & 1 else None,
            ListenerSpec(
                max_body_bytes=self.max_body, max_header_bytes=self.max_header, http1=limits
            ),
            asgi=app,
            budget=budget,
        )
        self.server.loop = loop
        self.transport = FakeTransport(loop)
        self.connection = Connection(self.server)
        self.transport.protocol = self.connection
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.ahead = 0.0
        self.write_paused = False

    def read(self, data: bytes) -> None:
        """Deliver ``data`` as the transport would: into the offered buffer, while reading."""
        view = memoryview(data)
        while view and self.transport.reading and not self.transport.closed:
            buffer = self.connection.get_buffer(-1)
            count = min(len(buffer), len(view), _READ)
            assert count > 0, "the protocol offered an empty buffer"
            buffer[:count] = view[:count]
            view = view[count:]
            self.connection.buffer_updated(count)
            self.check()

    def settle(self) -> None:
        for _ in range(8):
            self.loop.run_until_complete(asyncio.sleep(0))
        self.check()

    def sweep(self, seconds: float) -> None:
        self.ahead += seconds
        self.server.sweep(self.loop.time() + self.ahead)
        self.settle()

    def toggle_writing(self) -> None:
        if self.transport.closed:
            return
        if self.write_paused:
            self.connection.resume_writing()
        else:
            self.connection.pause_writing()
        self.write_paused = not self.write_paused
        self.check()

    def check(self) -> None:
        connection, budget = self.connection, self.server.budget
        assert budget.used >= 0, f"budget below zero: {budget.used}"
        # the request being read, what waits behind the running one, the running one (held
        # until answered), one read's overrun, and an answer waiting while writing is paused
        bound = 2 * self.max_body + max(self.server.limits.connection_buffer_bytes, self.max_body)
        unsent = connection._unsent
        assert budget.used <= bound + _READ + unsent, f"{budget.used} bytes buffered"
        assert len(connection._queue) <= 10, f"{len(connection._queue)} requests queued"
        reader = connection._reader
        assert reader._header_bytes <= self.max_header + _READ
        assert reader._head_fed <= self.max_header + _READ
        assert reader.body_bytes <= self.max_body + _READ

    def finish(self, sent: bytes) -> None:
        """The input is over: the clock runs ahead until the connection has closed."""
        if self.write_paused:
            self.toggle_writing()
        for _ in range(6):
            if self.transport.lost:
                break
            self.sweep(1000.0)
        assert self.transport.lost, "the connection never ended"
        assert self.server.budget.used == 0, f"{self.server.budget.used} bytes not given back"
        assert not self.server.connections
        if b"HEAD" not in sent:  # a HEAD answer has no body, which no parser can know
            check_responses(bytes(self.transport.written))


def check_responses(written: bytes) -> None:
    """What the server wrote parses as HTTP/1.1 responses."""

    class Sink:
        pass

    parser = httptools.HttpResponseParser(Sink())
    parser.feed_data(written)


def one_input(data: bytes) -> None:
    """``data``: an options byte, then bytes to read, split by commands ``\\xff`` + op."""
    if not data:
        return
    run = Run(LOOP, data[0])
    for number, segment in enumerate(data[1:].split(b"\xff")[:64]):
        if number:  # the segment starts with its command
            segment = _command(run, segment)
        if run.transport.lost:
            break
        run.read(segment)
    run.settle()
    run.finish(data)
    if ERRORS:
        raise AssertionError(f"asyncio reported: {ERRORS[0]}")


def _command(run: Run, segment: bytes) -> bytes:
    """Carry out the command ``segment`` starts with; the bytes left to read."""
    op, segment = (segment[0] % 8, segment[1:]) if segment else (7, segment)
    if op == 0:
        run.sweep(0.4)
    elif op == 1:
        run.sweep(5.0)
    elif op == 2:
        run.settle()
    elif op == 3:
        run.toggle_writing()
    elif op == 4:  # the client goes away
        run.transport.close()
        run.settle()
    elif op == 5 and len(segment) >= 2:  # padding: a long URL, header or body
        run.read(segment[:1] * (segment[1] * 1200 + 1))
        segment = segment[2:]
    return segment


ERRORS: list[str] = []
LOOP = asyncio.new_event_loop()
LOOP.set_exception_handler(lambda loop, context: ERRORS.append(str(context)))


def _escaped(token: bytes) -> str:
    return "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02x}" for b in token)


def main(argv: list[str]) -> None:
    import logging

    # the application's deliberate failures (/fail) are logged as errors: keep them quiet
    logging.disable(logging.CRITICAL)
    if not any(not arg.startswith("-") for arg in argv[1:]):
        corpus = Path(tempfile.mkdtemp(prefix="fuzz_http1_"))
        for number, seed in enumerate(_SEEDS):
            (corpus / f"seed{number}").write_bytes(seed)
        argv = [*argv, str(corpus)]
    if not any(arg.startswith("-artifact_prefix=") for arg in argv):
        argv = [argv[0], f"-artifact_prefix={tempfile.gettempdir()}/fuzz_http1_", *argv[1:]]
    if not any(arg.startswith("-dict=") for arg in argv):
        tokens = Path(tempfile.mkdtemp(prefix="fuzz_http1_dict_")) / "http1.dict"
        tokens.write_text("".join(f'"{_escaped(token)}"\n' for token in _TOKENS))
        argv = [argv[0], f"-dict={tokens}", *argv[1:]]
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
