"""One client connection of the HTTP/1.1 server (http_server.py): reads (the request being
read, within the bounds of ``Http1Limits``, is http_reader.py's), running requests one at a
time, in order, writing their answers, and the connection's clocks."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import httptools
import orjson

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
from inferplex.transport.http_reader import READ_BUFFER_BYTES, Halt, RequestReader
from inferplex.transport.http_refusals import Problem, malformed

__all__ = ["READ_BUFFER_BYTES", "Connection"]


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: bodies below this size are joined to their header block; larger ones go out with writev
_COPY_LIMIT = 64 * 1024
#: complete requests a connection may queue behind the running one before reading pauses
_MAX_PIPELINED = 8
#: after a refusal the server half-closes and reads (and drops) what the client still sends,
#: this long and this much at most, so that its answer is not lost to a TCP reset
_LINGER_S = 2.0
_LINGER_BYTES = 1 << 20


class Connection(asyncio.BufferedProtocol):
    """One client connection: parses requests and runs them one at a time, in order.

    Reads land in the server's read buffer, which the parser consumes before the next read of
    any connection (the buffer is shared: idle connections hold none). The body of a request
    with a large Content-Length gets a buffer of its size instead: once the parser has passed
    on the part that came with the header block, the rest is read from the socket straight
    into place (without this, uvloop's copy into a bytes object, the parser's copy of each
    piece and the join copied every body three times on the event loop). The parser, left
    expecting that body, is replaced by a new one for the next request.

    Bounds (``Http1Limits``): the request being read is counted as it arrives by its
    ``RequestReader`` (http_reader.py). The body bytes a connection holds stay in the
    server's ByteBudget until the request's answer is written (or the request dropped): a
    body queued for a busy model still holds its bytes, so bodies waiting for one cannot pass
    ``--max-buffered-bytes``; so does an answer the client does not read, while writing is
    paused. Clocks are read by the server's sweep (``expire``): the reader's (a header block
    or a body is arriving) and ``_idle_since`` (the start, or the last answer: 0 until the
    sweep stamps it, so that an answer costs no clock reading). Per request the bounds cost
    stores and comparisons only.
    """

    def __init__(self, server: Host) -> None:
        self.server = server
        self._app = server.app
        native = server.native
        self._respond = native.respond if native is not None else None
        self._loop = server.loop
        self._limits = server.limits
        self._budget = server.budget
        self._read_buffer = server.read_buffer
        self._transport: asyncio.Transport | None = None
        self._scope_base: dict[str, Any] = {}
        self._queue: deque[Request | Refusal] = deque()  # parsed, not yet answered
        self.queued_bytes = 0  # the sizes of the requests in the queue
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
        self._write_paused_since = 0.0
        self._lingering = 0.0  # a refusal was sent: since when the rest is dropped
        self._lingered = 0
        self._max_buffered = self._limits.connection_buffer_bytes
        #: the request being read
        self._reader = RequestReader(self, server, self._queue)

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
        self._reader.drop()
        self._budget.used -= self.queued_bytes
        self.queued_bytes = 0
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
        rest = self._reader.body_rest
        return self._read_buffer if rest is None else rest

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self._loop.time()
        reader = self._reader
        if reader.body_rest is None:
            self._parse(self._read_buffer[:nbytes])
        else:
            reader.read_into_place(nbytes)
        self._next()

    def _parse(self, data: memoryview) -> None:
        if self._refused:
            self._lingered += len(data)
            if self._lingering and self._lingered > _LINGER_BYTES:
                self.close()
            return
        reader = self._reader
        try:
            reader.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # no protocol upgrades (WebSocket, h2c): answer the request as plain HTTP/1.1
            self._closing = True
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, Halt):
                return  # refused in a callback
            raise
        except httptools.HttpParserError as exc:
            self.refuse(malformed(str(exc)))
            return
        # (inline, not a call: this runs per read)
        if reader.large_body is not None:  # not complete yet: the rest is read into place
            reader.body_rest = reader.large_body[reader.body_bytes :]
        elif reader.head_since:
            reader.count_head(len(data))

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

    # -- refusals -------------------------------------------------------------------------
    def refuse(self, problem: Problem) -> None:
        """Answer after the requests before it, then close; read nothing more."""
        self.refuse_with(
            Refusal(problem.status, orjson.dumps({"error": problem.message})), problem.reason
        )

    def refuse_with(self, refusal: Refusal, reason: str) -> None:
        self._refused = True
        self.server.refusals[reason] += 1
        self._queue.append(refusal)
        self._stop_reading()
        self._reader.drop()

    def send_continue(self) -> None:
        """The client waits for a 100 Continue before it sends the body."""
        if self._transport is not None:
            self._transport.write(_CONTINUE)

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
                self.queued_bytes -= item.size
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
        body_bytes = self._reader.body_bytes
        if (self._queue or body_bytes) and (
            len(self._queue) > _MAX_PIPELINED
            or self.queued_bytes + self._running + body_bytes > self._max_buffered
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
        reader = self._reader
        if reader.head_since or reader.body_since:
            problem = reader.expired(now, self._idle_since, limits)
            if problem is not None:
                self.refuse(problem)
                self._next()
        elif now - self._idle_since > limits.keep_alive_s:
            transport.close()

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
