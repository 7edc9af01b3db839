"""What the HTTP/1.1 server lets one client make it hold: time, bytes, and the answer each
bound gives (docs/security.md lists them with their flags).

Every bound here is checked with counters and comparisons only: per request a few integer
additions; the timeouts are read once a second by the server's sweep, not per request.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["REASONS", "ByteBudget", "Http1Limits"]

#: why the server answered a request itself (the ``reason`` label of
#: ``inferplex_http_refusals``), with the status it answered
REASONS: dict[str, int] = {
    "malformed": 400,  # the parser refused the bytes
    "missing_host": 400,  # an HTTP/1.1 request without exactly one Host header
    "http_version": 505,  # HTTP/2.0, HTTP/0.9, the HTTP/2 preface
    "uri_too_long": 414,  # the request line passed max_header_bytes
    "header_too_large": 431,  # the header block passed max_header_bytes
    "body_too_large": 413,  # the body passed max_request_bytes
    "header_timeout": 408,  # the header block took longer than http_header_timeout_s
    "body_timeout": 408,  # the body came slower than http_body_min_rate
    "server_buffer_full": 503,  # bodies buffered server-wide passed max_buffered_bytes
    "transfer_coding": 501,  # a Transfer-Encoding other than chunked (RFC 9112 6.1)
    "admission": 0,  # the app refused the route, method or token (its own status)
}


@dataclass(frozen=True, slots=True)
class Http1Limits:
    """The HTTP/1.1 server's bounds on time and buffered bytes (ServerConfig's ``http_*``
    fields; these defaults are theirs)."""

    #: seconds from a request's first byte to the end of its header block
    header_timeout_s: float = 10.0
    #: a request body must bring at least ``body_min_rate`` bytes per second, measured over
    #: windows of this many seconds (so a body that stops gets 408 within about twice this)
    body_timeout_s: float = 30.0
    #: bytes per second; 0: only a body that sends nothing for a whole window is cut
    body_min_rate: int = 16 * 1024
    #: request bytes one connection may hold besides the request its application runs
    #: (pipelined requests and the body being read); past it, reading pauses
    connection_buffer_bytes: int = 16 * 1024 * 1024
    #: seconds a connection may sit between requests (or before its first)
    keep_alive_s: float = 5.0
    #: seconds an answer may wait on a client that does not read it; then the connection is
    #: dropped with what it still had to send
    send_timeout_s: float = 30.0


class ByteBudget:
    """Request bytes buffered server-wide, in bodies being read or parsed and waiting for the
    application; one per process, shared by its listeners. ``used`` is updated in place by
    the connections (an attribute add is the whole per-request cost)."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        #: 0: no limit
        self.limit = limit
        self.used = 0

    @property
    def exceeded(self) -> bool:
        return 0 < self.limit < self.used
