"""One client connection of the HTTP/1.1 server (http_server.py): parsing, the bounds of
``Http1Limits`` as the bytes arrive, and running requests one at a time, in order."""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from typing import TYPE_CHECKING, Any, NoReturn

import httptools
import orjson

from inferplex.transport.buffers import uninitialised
from inferplex.transport.http_cycle import (
    Cycle,
    Host,
    Refusal,
    Request,
    answer,
    asgi_scope,
    scope_base,
)
from inferplex.transport.http_limits import TRIM_BYTES
from inferplex.transport.http_refusals import (
    BUFFER_FULL,
    Problem,
    body_timeout,
    body_too_large,
    head_fields,
    head_problem,
    head_too_large,
    header_timeout,
    malformed,
    uri_too_long,
)

if TYPE_CHECKING:
    from inferplex.transport.http_limits import Http1Limits

__all__ = ["READ_BUFFER_BYTES", "Connection"]


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: bodies below this size are joined to their header block; larger ones go out with writev
_COPY_LIMIT = 64 * 1024
#: the server's read buffer; request bodies of at least this size are read into their own
READ_BUFFER_BYTES = 64 * 1024
#: complete requests a connection may queue behind the running one before reading pauses
_MAX_PIPELINED = 8
#: after a refusal the server half-closes and reads (and drops) what the client still sends,
#: this long and this much at most, so that its answer is not lost to a TCP reset
_LINGER_S = 2.0
_LINGER_BYTES = 1 << 20


class _Halt(Exception):
    """Raised in a parser callback once the request is refused: the parser stops there."""


class Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests and runs them one at a time, in order.

    Reads land in the server's read buffer, which the parser consumes before the next read of
    any connection (the buffer is shared: idle connections hold none). The body of a request
    with a large Content-Length gets a buffer of its size instead: once the parser has passed
    on the part that came with the header block, the rest is read from the socket straight
    into place (without this, uvloop's copy into a bytes object, the parser's copy of each
    piece and the join copied every body three times on the event loop). The parser, left
    expecting that body, is replaced by a new one for the next request.

    Bounds (``Http1Limits``): the header block is counted as it arrives, through the parser's
    callbacks and, while a header block spans reads, by the bytes of those reads (httptools
    joins a header's pieces itself, copying the whole value on every read: without a cap a
    header sent in small pieces costs quadratic time). The body bytes a connection holds are
    counted in the server's ByteBudget from the moment they are read (a large body, whole,
    when its buffer is made with its headers) until the request's answer is written (or the
    request dropped): a body queued for a busy model still holds its bytes, so bodies waiting
    for one cannot pass ``--max-buffered-bytes``; so does an answer the client does not
    read, while writing is paused. Clocks are read by the server's sweep: ``_head_since`` (a
    header block is arriving), ``_body_since`` (a body is), ``_idle_since`` (the start, or
    the last answer: 0 until the sweep stamps it, so that an answer costs no clock
    reading). Per request the bounds cost stores and comparisons only.
    """

    def __init__(self, server: Host) -> None:
        self.server = server
        self._app = server.app
        self._admit = server.admit
        native = server.native
        self._respond = native.respond if native is not None else None
        self._loop = server.loop
        self._limits = server.limits
        self._budget = server.budget
        self._parser = httptools.HttpRequestParser(self)
        self._read_buffer = server.read_buffer
        self._transport: asyncio.Transport | None = None
        self._scope_base: dict[str, Any] = {}
        self._queue: deque[Request | Refusal] = deque()  # parsed, not yet answered
        self._queued_bytes = 0  # the sizes of the requests in the queue
        self._running = 0  # the body bytes of the request with the application
        self._unsent = 0  # bytes of an answer held while writing is paused
        self._busy = False  # a request is with the application
        self._task: asyncio.Task[None] | None = None  # the application running it
        self._closing = False  # answer what runs, then close
        self._reading = True
        self._refused = False  # a refusal is queued: the connection reads nothing more
        self._disconnected: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused
        self.last_active = 0.0  # the time of the last read
        self._idle_since = 0.0
        self._head_since = 0.0  # 0: no header block is arriving
        self._body_since = 0.0  # 0: no body is arriving; else the start of its rate window
        self._body_mark = 0  # the body's bytes at that start
        self._write_paused_since = 0.0
        self._lingering = 0.0  # a refusal was sent: since when the rest is dropped
        self._lingered = 0
        # bytes of reads that were nothing but header block; -1: no header block was
        # unfinished at the end of the previous read
        self._head_fed = -1
        self._max_head = server.max_header_bytes or sys.maxsize
        # the most body bytes of the request being parsed: the server's, or what its
        # endpoint takes (set by the admission check), and the setting that says so
        self._body_limit = server.max_body_bytes
        self._body_flag = "INFERPLEX_MAX_REQUEST_BYTES"
        self._max_buffered = self._limits.connection_buffer_bytes
        # the request being parsed
        self._url = b""
        self._url_parts: list[bytes] | None = None  # a URL that came in several pieces
        self._version = "1.1"
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._body: list[bytes] = []
        self._body_bytes = 0  # read so far, and held in the server's ByteBudget
        # a large body is charged whole when its headers come (its buffer is made then):
        # what of it has not arrived yet
        self._reserved = 0
        self._large_body: memoryview | None = None  # a large body's own buffer
        self._body_rest: memoryview | None = None  # its part still to read, past the parser
        self._request: Request | None = None  # made early, for the admission check

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses
        server = self.server
        self._scope_base = scope_base(transport, server.scheme)
        self.last_active = self._idle_since = self._loop.time()
        server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._transport = None
        self._release()
        self._budget.used -= self._queued_bytes
        self._queued_bytes = 0
        self._queue.clear()
        self._ran()
        self._sent()
        if self._task is not None and not self._task.done():
            # the client is gone: its request leaves the model's queue (or its running
            # handler is told) instead of being computed for nobody
            self._task.cancel()
        if self._disconnected is not None and not self._disconnected.done():
            self._disconnected.set_result(None)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def get_buffer(self, sizehint: int) -> memoryview:
        # the rest of a large body, exactly: a pipelined request after it is the parser's
        rest = self._body_rest
        return self._read_buffer if rest is None else rest

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        rest = self._body_rest
        if rest is None:
            self._parse(self._read_buffer[:nbytes])
        else:  # (charged whole with its headers)
            self._body_bytes += nbytes
            self._reserved -= nbytes
            if nbytes < len(rest):
                self._body_rest = rest[nbytes:]
            else:
                self._body_rest = None
                assert self._large_body is not None
                self._complete(self._large_body)
                # the parser still awaits this body: the next request gets a new one
                self._parser = httptools.HttpRequestParser(self)
        self._next()

    def _parse(self, data: memoryview) -> None:
        if self._refused:
            self._lingered += len(data)
            if self._lingering and self._lingered > _LINGER_BYTES:
                self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # no protocol upgrades (WebSocket, h2c): answer the request as plain HTTP/1.1
            self._closing = True
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Halt):
                return  # refused in a callback
            raise
        except httptools.HttpParserError as exc:
            self._refuse(malformed(str(exc)))
            return
        if self._large_body is not None:  # not complete yet: the rest is read into place
            self._body_rest = self._large_body[self._body_bytes :]
        elif self._head_since:
            self._count_head(len(data))

    def _count_head(self, size: int) -> None:
        """A header block is unfinished after a read of ``size`` bytes. The parser keeps a
        header's pieces to itself, so they are counted here: a read that began inside this
        block was nothing but it (the part of the read where the block began is left out:
        one read at most)."""
        if self._head_fed < 0:
            self._head_fed = 0
        else:
            self._head_fed += size
            if self._head_fed > self._max_head:
                self._refuse(head_too_large(self._max_head))

    def pause_writing(self) -> None:
        self._drained = self._loop.create_future()
        self._write_paused_since = self._loop.time()
        # what waits in the transport for the client is held for it: charged until it leaves
        if self._transport is not None and not self._unsent:
            self._unsent = self._transport.get_write_buffer_size()
            self._budget.used += self._unsent

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None
        self._write_paused_since = 0.0
        self._sent()
        self._next()  # the next request waited for its answer to have room

    def _sent(self) -> None:
        """The answer held while writing was paused is out (or dropped)."""
        unsent = self._unsent
        if unsent:
            self._unsent = 0
            self._budget.used -= unsent
            self._budget.freed(unsent)

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""  # (_url_parts is None: reset when a header block ends or is refused)
        self._headers = []
        self._header_bytes = 0
        self._body = []
        self._large_body = None
        self._request = None
        self._head_since = self.last_active
        self._body_limit = self.server.max_body_bytes
        self._body_flag = "INFERPLEX_MAX_REQUEST_BYTES"

    def on_url(self, url: bytes) -> None:
        if not self._url:
            self._url = url
        elif self._url_parts is None:  # a URL in pieces: joined once, not re-joined per piece
            self._url_parts = [self._url, url]
        else:
            self._url_parts.append(url)
        self._header_bytes += len(url)
        if self._header_bytes > self._max_head:
            self._halt(uri_too_long(self._max_head))

    def on_header(self, name: bytes, value: bytes) -> None:
        # the separator and line end count too: many tiny headers are not free
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > self._max_head:
            self._halt(head_too_large(self._max_head))
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._head_since = 0.0
        self._head_fed = -1
        if self._url_parts is not None:
            self._url = b"".join(self._url_parts)
            self._url_parts = None
        version = self._version = self._parser.get_http_version()
        length, chunked, expect_continue, hosts, coding = head_fields(self._headers)
        if hosts != 1 or coding is not None or (version != "1.1" and version != "1.0"):
            problem = head_problem(version, hosts, coding)
            if problem is not None:
                self._halt(problem)
        if self._admit is not None and (chunked or (length or 0) >= READ_BUFFER_BYTES):
            self._admit_early(version)
        if length:
            self._take_length(length)
        if length or chunked:
            self._body_since = self.last_active
            self._body_mark = 0
        if expect_continue and self._transport is not None:
            self._transport.write(_CONTINUE)

    def _admit_early(self, version: str) -> None:
        """A request with a body larger than one read is admitted (route, method, token)
        before any of its body is read or buffered: a client that may not call the endpoint
        sends nothing more (a smaller body comes with its headers: the app admits it as it
        does every request, at no cost beside the hot path's)."""
        admit = self._admit
        assert admit is not None
        method = self._parser.get_method().decode("ascii")
        request = self._request = Request(method, self._url, self._headers, version)
        refusal = admit(request)
        if refusal is not None:
            self._refuse_with(Refusal(*refusal), "admission")
            raise _Halt
        if request.body_limit:  # what the endpoint takes (a chunked body's bound)
            self._body_limit = request.body_limit
            self._body_flag = request.body_limit_flag

    def _take_length(self, length: int) -> None:
        """A body of Content-Length ``length`` is coming: refused above the limits; a large
        one charged whole now, as its buffer is made (bodies arriving together cannot pass
        the budget between them)."""
        if length > self.server.max_body_bytes:
            self._halt(
                body_too_large(f"Content-Length {length}", self._body_limit, self._body_flag)
            )
        budget = self._budget
        if 0 < budget.limit < budget.used + length:
            self._refuse_with(BUFFER_FULL, "server_buffer_full")
            raise _Halt
        if length >= READ_BUFFER_BYTES and not self._parser.should_upgrade():
            self._large_body = uninitialised(length)
            self._reserved = length
            budget.used += length

    def on_body(self, body: bytes) -> None:
        start = self._body_bytes
        end = self._body_bytes = start + len(body)
        if self._large_body is not None:  # checked against the limits, and charged whole
            self._reserved -= len(body)
            self._large_body[start:end] = body
            return
        budget = self._budget
        budget.used += len(body)
        if end > self._body_limit:
            self._halt(body_too_large(f"at least {end} bytes", self._body_limit, self._body_flag))
        if 0 < budget.limit < budget.used:
            self._refuse_with(BUFFER_FULL, "server_buffer_full")
            raise _Halt
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._large_body is not None:
            self._complete(self._large_body)
        else:
            body = self._body
            self._complete(body[0] if len(body) == 1 else b"".join(body))

    def _complete(self, body: bytes | memoryview) -> None:
        """The request being parsed is complete, with ``body``."""
        parser = self._parser
        request = self._request
        if request is None:
            request = Request(
                parser.get_method().decode("ascii"), self._url, self._headers, self._version
            )
        else:
            self._request = None
        request.body = body
        request.keep_alive = parser.should_keep_alive()
        size = self._body_bytes
        if size:
            self._body_bytes = 0
            self._queued_bytes += size
            request.size = size
        self._large_body = None
        self._body_since = 0.0
        self._queue.append(request)

    # -- refusals -------------------------------------------------------------------------
    def _halt(self, problem: Problem) -> NoReturn:
        """Refuse the request being parsed, from a parser callback: the parser stops."""
        self._refuse(problem)
        raise _Halt

    def _refuse(self, problem: Problem) -> None:
        """Answer after the requests before it, then close; read nothing more."""
        self._refuse_with(
            Refusal(problem.status, orjson.dumps({"error": problem.message})), problem.reason
        )

    def _refuse_with(self, refusal: Refusal, reason: str) -> None:
        self._refused = True
        self.server.refusals[reason] += 1
        self._queue.append(refusal)
        self._stop_reading()
        self._release()
        self._head_since = self._body_since = 0.0

    def _release(self) -> None:
        """Drop the request being parsed and give its bytes back to the budget."""
        self._budget.used -= self._body_bytes + self._reserved
        self._body_bytes = self._reserved = 0
        self._body = []
        self._large_body = self._body_rest = None
        self._url_parts = None

    def _stop_reading(self) -> None:
        if self._reading and self._transport is not None:
            self._reading = False
            self._transport.pause_reading()

    # -- running requests -----------------------------------------------------------------
    def _next(self) -> None:
        """Start the next parsed request unless one runs; pause or resume reading."""
        transport = self._transport
        if transport is None:
            return
        # while the client does not read its answers, no more are made (nor buffered)
        if not self._busy and self._drained is None:
            if not self._queue:
                if not self._reading and not self._refused:
                    self._reading = True
                    transport.resume_reading()
                return
            item = self._queue.popleft()
            if isinstance(item, Refusal):
                self._write_refusal(item)
                return
            if item.size:  # (still in the budget: until answered)
                self._queued_bytes -= item.size
                self._running = item.size
            self._busy = True
            if self._respond is not None:
                self._task = self._loop.create_task(answer(self, item, self._respond))
            else:
                assert self._app is not None  # the server has one or the other
                cycle = Cycle(self, item)
                self._task = self._loop.create_task(
                    self._app(asgi_scope(self._scope_base, item), cycle.receive, cycle.send)
                )
                self._task.add_done_callback(cycle.finished)
        # a client pipelining far ahead of its answers waits for them
        if (self._queue or self._body_bytes) and (
            len(self._queue) > _MAX_PIPELINED
            or self._queued_bytes + self._running + self._body_bytes > self._max_buffered
        ):
            self._stop_reading()
        elif not self._reading and not self._refused:
            self._reading = True
            transport.resume_reading()

    def _write_refusal(self, refusal: Refusal) -> None:
        transport = self._transport
        assert transport is not None
        transport.write(refusal.encode())
        if not transport.can_write_eof():  # TLS
            transport.close()
            return
        # closing with the client's bytes unread would reset the connection, and the client
        # might never read its answer: half-close, then drop what still comes, for a while
        transport.write_eof()
        self._lingering = self._loop.time()
        self._reading = True
        transport.resume_reading()

    def answered(self, keep_alive: bool) -> None:
        """The running request's response is complete."""
        self._busy = False
        if self._running:
            self._ran()
        self._idle_since = 0.0  # stamped by the sweep
        transport = self._transport
        if transport is None:
            return
        if not keep_alive or (self._closing and not self._queue) or self.server.stopping:
            transport.close()
            return
        self._next()

    def _ran(self) -> None:
        """The running request is answered or dropped: its body leaves the budget."""
        running = self._running
        if running:
            self._running = 0
            self._budget.used -= running
            if running >= TRIM_BYTES:
                self._budget.freed(running)

    def expire(self, now: float) -> None:
        """Apply the clocks of ``Http1Limits`` at ``now`` (the server's sweep)."""
        transport = self._transport
        if transport is None:
            return
        limits = self._limits
        if self._write_paused_since and now - self._write_paused_since > limits.send_timeout_s:
            # the client has not read its answer for that long: the bytes waiting for it go
            self.server.send_timeouts += 1
            transport.abort()
            return
        if self._lingering:
            if now - self._lingering > _LINGER_S:
                transport.close()
            return
        if self._busy or self._queue or self._refused:
            return  # the application has it, or a refusal is waiting to be written
        if not self._idle_since:
            self._idle_since = now  # answered since the last sweep
        if self._head_since:
            self._expire_head(now, limits)
        elif self._body_since:
            self._expire_body(now, limits)
        elif now - self._idle_since > limits.keep_alive_s:
            transport.close()

    def _expire_head(self, now: float, limits: Http1Limits) -> None:
        """Refuse a header block that has taken longer than its clock allows."""
        if now - max(self._head_since, self._idle_since) > limits.header_timeout_s:
            self._refuse(header_timeout(limits.header_timeout_s))
            self._next()

    def _expire_body(self, now: float, limits: Http1Limits) -> None:
        """Refuse a body slower than the minimum rate over a window, or start a new window."""
        elapsed = now - max(self._body_since, self._idle_since)
        if elapsed < limits.body_timeout_s:
            return
        received = self._body_bytes - self._body_mark
        if not received or received < limits.body_min_rate * elapsed:
            self._refuse(body_timeout(received, elapsed, limits.body_min_rate))
            self._next()
        else:  # a new window
            self._body_since = now
            self._body_mark = self._body_bytes

    def disconnected(self) -> asyncio.Future[None]:
        if self._disconnected is None:
            self._disconnected = self._loop.create_future()
            if self._transport is None:
                self._disconnected.set_result(None)
        return self._disconnected

    def write(self, head: bytes, body: bytes) -> asyncio.Future[None] | None:
        """Write a response's header block (may be empty) and body in one go; a future to
        await when the transport asked us to pause."""
        transport = self._transport
        if transport is not None:
            if len(body) < _COPY_LIMIT:
                transport.write(head + body)  # one small copy beats a list and a writev
            else:
                transport.writelines((head, body))
        return self._drained

    @property
    def lost(self) -> bool:
        """The client's connection is gone."""
        return self._transport is None

    @property
    def idle(self) -> bool:
        return not self._busy and not self._queue

    @property
    def closing(self) -> bool:
        """Its transport is closing or gone: no request of it can be answered any more."""
        return self._transport is None or self._transport.is_closing()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
