"""The request being read on one HTTP/1.1 connection (http_connection.py): httptools'
callbacks, and the bounds of ``Http1Limits`` on its header block and body as they arrive.

A request is counted as it comes: its header block through the parser's callbacks and, while
it spans reads, by the bytes of those reads (``count_head``: httptools joins a header's
pieces itself, copying the whole value on every read, so without a cap a header sent in
small pieces costs quadratic time); its body in the server's ByteBudget from the moment it is
read (a large body, whole, when its buffer is made with its headers). A complete request
joins its connection's queue; a refused one stops the parser (``Halt``) and is answered by
the connection. The clocks of a header block and a body (``head_since``, ``body_since``)
are read by the connection's sweep (``expired``).
"""

from __future__ import annotations

import sys
from collections import deque
from typing import TYPE_CHECKING, NoReturn, Protocol

import httptools

from inferplex.transport.buffers import uninitialised
from inferplex.transport.http_cycle import Refusal, Request
from inferplex.transport.http_refusals import (
    BUFFER_FULL,
    Problem,
    body_timeout,
    body_too_large,
    head_fields,
    head_problem,
    head_too_large,
    header_timeout,
    uri_too_long,
)

if TYPE_CHECKING:
    from inferplex.transport.http_cycle import Host
    from inferplex.transport.http_limits import Http1Limits

#: the server's read buffer; request bodies of at least this size are read into their own
READ_BUFFER_BYTES = 64 * 1024


class Halt(Exception):
    """Raised in a parser callback once the request is refused: the parser stops there."""


class Owner(Protocol):
    """The connection a request is read for (http_connection.Connection)."""

    #: the time of its last read
    last_active: float
    #: the body bytes of the requests in its queue
    queued_bytes: int

    def refuse(self, problem: Problem) -> None: ...
    def refuse_with(self, refusal: Refusal, reason: str) -> None: ...
    def send_continue(self) -> None: ...


class RequestReader:
    """The request being parsed on one connection, within its bounds."""

    def __init__(self, owner: Owner, server: Host, queue: deque[Request | Refusal]) -> None:
        self._owner = owner
        self._server = server
        self._queue = queue
        self._admit = server.admit
        self._budget = server.budget
        self.parser = httptools.HttpRequestParser(self)
        self._max_head = server.max_header_bytes or sys.maxsize
        # the most body bytes of the request being parsed: the server's, or what its
        # endpoint takes (set by the admission check), and the setting that says so
        self._body_limit = server.max_body_bytes
        self._body_flag = "INFERPLEX_MAX_REQUEST_BYTES"
        self._url = b""
        self._url_parts: list[bytes] | None = None  # a URL that came in several pieces
        self._version = "1.1"
        self._headers: list[tuple[bytes, bytes]] = []
        self._header_bytes = 0
        self._body: list[bytes] = []
        self.body_bytes = 0  # read so far, and held in the server's ByteBudget
        # a large body is charged whole when its headers come (its buffer is made then):
        # what of it has not arrived yet
        self._reserved = 0
        self.large_body: memoryview | None = None  # a large body's own buffer
        self.body_rest: memoryview | None = None  # its part still to read, past the parser
        self._request: Request | None = None  # made early, for the admission check
        # bytes of reads that were nothing but header block; -1: no header block was
        # unfinished at the end of the previous read
        self._head_fed = -1
        self.head_since = 0.0  # 0: no header block is arriving
        self.body_since = 0.0  # 0: no body is arriving; else the start of its rate window
        self._body_mark = 0  # the body's bytes at that start

    def read_into_place(self, nbytes: int) -> None:
        """``nbytes`` of a large body were read straight into its buffer (charged whole
        with its headers)."""
        rest = self.body_rest
        assert rest is not None and self.large_body is not None
        self.body_bytes += nbytes
        self._reserved -= nbytes
        if nbytes < len(rest):
            self.body_rest = rest[nbytes:]
            return
        self.body_rest = None
        self._complete(self.large_body)
        # the parser still awaits this body: the next request gets a new one
        self.parser = httptools.HttpRequestParser(self)

    def count_head(self, size: int) -> None:
        """A header block is unfinished after a read of ``size`` bytes. The parser keeps a
        header's pieces to itself, so they are counted here: a read that began inside this
        block was nothing but it (the part of the read where the block began is left out:
        one read at most)."""
        if self._head_fed < 0:
            self._head_fed = 0
        else:
            self._head_fed += size
            if self._head_fed > self._max_head:
                self._owner.refuse(head_too_large(self._max_head))

    def drop(self) -> None:
        """Drop the request being parsed and give its bytes back to the budget."""
        self._budget.used -= self.body_bytes + self._reserved
        self.body_bytes = self._reserved = 0
        self._body = []
        self.large_body = self.body_rest = None
        self._url_parts = None
        self.head_since = self.body_since = 0.0

    def expired(self, now: float, idle_since: float, limits: Http1Limits) -> Problem | None:
        """The clocks of ``Http1Limits`` at ``now``: a header block or a body that has taken
        too long (a body slower than the minimum rate over a window; else a new window
        starts), or None."""
        if self.head_since:
            if now - max(self.head_since, idle_since) > limits.header_timeout_s:
                return header_timeout(limits.header_timeout_s)
            return None
        elapsed = now - max(self.body_since, idle_since)
        if elapsed < limits.body_timeout_s:
            return None
        received = self.body_bytes - self._body_mark
        if not received or received < limits.body_min_rate * elapsed:
            return body_timeout(received, elapsed, limits.body_min_rate)
        self.body_since = now  # a new window
        self._body_mark = self.body_bytes
        return None

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""  # (_url_parts is None: reset when a header block ends or is refused)
        self._headers = []
        self._header_bytes = 0
        self._body = []
        self.large_body = None
        self._request = None
        self.head_since = self._owner.last_active
        self._body_limit = self._server.max_body_bytes
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
        self.head_since = 0.0
        self._head_fed = -1
        if self._url_parts is not None:
            self._url = b"".join(self._url_parts)
            self._url_parts = None
        version = self._version = self.parser.get_http_version()
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
            self.body_since = self._owner.last_active
            self._body_mark = 0
        if expect_continue:
            self._owner.send_continue()

    def _admit_early(self, version: str) -> None:
        """A request with a body larger than one read is admitted (route, method, token)
        before any of its body is read or buffered: a client that may not call the endpoint
        sends nothing more (a smaller body comes with its headers: the app admits it as it
        does every request, at no cost beside the hot path's)."""
        admit = self._admit
        assert admit is not None
        method = self.parser.get_method().decode("ascii")
        request = self._request = Request(method, self._url, self._headers, version)
        refusal = admit(request)
        if refusal is not None:
            self._owner.refuse_with(Refusal(*refusal), "admission")
            raise Halt
        if request.body_limit:  # what the endpoint takes (a chunked body's bound)
            self._body_limit = request.body_limit
            self._body_flag = request.body_limit_flag

    def _take_length(self, length: int) -> None:
        """A body of Content-Length ``length`` is coming: refused above the limits; a large
        one charged whole now, as its buffer is made (bodies arriving together cannot pass
        the budget between them)."""
        if length > self._server.max_body_bytes:
            self._halt(
                body_too_large(f"Content-Length {length}", self._body_limit, self._body_flag)
            )
        budget = self._budget
        if 0 < budget.limit < budget.used + length:
            self._owner.refuse_with(BUFFER_FULL, "server_buffer_full")
            raise Halt
        if length >= READ_BUFFER_BYTES and not self.parser.should_upgrade():
            self.large_body = uninitialised(length)
            self._reserved = length
            budget.used += length

    def on_body(self, body: bytes) -> None:
        start = self.body_bytes
        end = self.body_bytes = start + len(body)
        if self.large_body is not None:  # checked against the limits, and charged whole
            self._reserved -= len(body)
            self.large_body[start:end] = body
            return
        budget = self._budget
        budget.used += len(body)
        if end > self._body_limit:
            self._halt(body_too_large(f"at least {end} bytes", self._body_limit, self._body_flag))
        if 0 < budget.limit < budget.used:
            self._owner.refuse_with(BUFFER_FULL, "server_buffer_full")
            raise Halt
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.large_body is not None:
            self._complete(self.large_body)
        else:
            body = self._body
            self._complete(body[0] if len(body) == 1 else b"".join(body))

    def _complete(self, body: bytes | memoryview) -> None:
        """The request being parsed is complete, with ``body``: to the connection's queue."""
        parser = self.parser
        request = self._request
        if request is None:
            request = Request(
                parser.get_method().decode("ascii"), self._url, self._headers, self._version
            )
        else:
            self._request = None
        request.body = body
        request.keep_alive = parser.should_keep_alive()
        size = self.body_bytes
        if size:
            self.body_bytes = 0
            self._owner.queued_bytes += size
            request.size = size
        self.large_body = None
        self.body_since = 0.0
        self._queue.append(request)

    def _halt(self, problem: Problem) -> NoReturn:
        """Refuse the request being parsed, from a parser callback: the parser stops."""
        self._owner.refuse(problem)
        raise Halt
