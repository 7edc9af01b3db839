"""What one HTTP/2 client may make the server hold or do (docs/security.md), the counters of
each limit a client ran into (metrics/collector.py reads them), and the checks RFC 9113
section 8 asks of a request's header fields.

Each limit is answered as the protocol says and as grpc-core and nghttp2 do: a header block
of too many frames or bytes, and a client spending the server's time on frames that do no
work (resets, PINGs, SETTINGS, empty frames), with GOAWAY ENHANCE_YOUR_CALM; request bytes
past the buffering caps with RESOURCE_EXHAUSTED on the stream; silence past a timeout with
GOAWAY and a close; a response stalled on a closed window past the send timeout with
RST_STREAM CANCEL.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from inferplex.transport.http_limits import ByteBudget

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Http2Limits:
    """Per-connection and server-wide bounds; ServerConfig's ``http2_*`` fields set them
    (their descriptions there are the documentation). A time of 0 turns its limit off."""

    max_concurrent_streams: int = 1024
    #: HEADERS + CONTINUATION frames one header block may take (nghttp2 allows 8)
    max_header_frames: int = 32
    #: streams the peer resets before they are answered, and streams refused, in a burst;
    #: then ``resets_per_s`` (nghttp2's defaults: 1000, 33/s); every stream answered
    #: gives one back
    max_resets: int = 1000
    resets_per_s: float = 33.0
    #: frames that do no work (PING, SETTINGS, PRIORITY, WINDOW_UPDATE, empty DATA and
    #: CONTINUATION, RST_STREAM of closed streams, unknown types) in a burst, then per
    #: second; every stream answered gives back 8, every DATA frame sent one
    max_control_frames: int = 1000
    control_frames_per_s: float = 100.0
    preface_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    keepalive_s: float = 0.0
    keepalive_timeout_s: float = 20.0
    max_connection_age_s: float = 0.0
    max_connection_age_grace_s: float = 30.0
    send_timeout_s: float = 30.0
    #: request bytes one connection may buffer (one message alone may take more); the
    #: server-wide bound is the ByteBudget in Http2Counters, shared with the HTTP listeners
    connection_buffer_bytes: int = 64 << 20


class Http2Counters:
    """The server's HTTP/2 connections together: request bytes they buffer (``buffered``;
    ``budget``, the server-wide bound, counts them with the HTTP listeners' when shared),
    connections open, and how often each limit was exceeded (by name:
    metrics/http2.py lists them)."""

    __slots__ = ("budget", "buffered", "connections", "exceeded")

    def __init__(self, budget: ByteBudget | None = None) -> None:
        self.budget = budget if budget is not None else ByteBudget(1 << 30)
        self.buffered = 0
        self.connections = 0
        self.exceeded: Counter[str] = Counter()


# -- request header fields (RFC 9113 8.2, 8.3) ----------------------------------------------

_REQUEST_PSEUDO = frozenset((b":method", b":scheme", b":path", b":authority", b":protocol"))
_CONNECTION_SPECIFIC = frozenset(
    (b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade")
)
#: what a field name may hold (RFC 9110 5.6.2 tchar, lower case only: RFC 9113 8.2.1)
_NAME_BYTES = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
#: NUL, CR or LF anywhere, or whitespace at either end, makes a value malformed
_BAD_VALUE = re.compile(rb"[\0\r\n]|\A[ \t]|[ \t]\Z")


def _field_problem(name: bytes, value: bytes) -> str | None:
    if not name:
        return "an empty field name"
    if name.translate(None, _NAME_BYTES):
        return f"field name {name[:64]!r} is not lower-case token characters"
    if name in _CONNECTION_SPECIFIC:
        return f"connection-specific field {name.decode()!r}"
    if name == b"te" and value != b"trailers":
        return "te other than 'trailers'"
    if _BAD_VALUE.search(value):
        return f"the value of {name.decode()!r} holds NUL, CR, LF or edge whitespace"
    return None


def request_problem(headers: Headers) -> tuple[str | None, int]:
    """Why a request's header list is malformed (None: it is not), and its content-length
    (-1: none)."""
    problem, pseudo = _pseudo_headers(headers)
    if problem is not None:
        return problem, -1
    problem, length = _regular_fields(headers[len(pseudo) :])
    if problem is not None:
        return problem, -1
    return _pseudo_set_problem(pseudo), length


def _pseudo_headers(headers: Headers) -> tuple[str | None, dict[bytes, bytes]]:
    """Why the pseudo-header fields a request begins with are malformed (None: they are
    not), and their values by name."""
    pseudo: dict[bytes, bytes] = {}
    for name, value in headers:
        if name[:1] != b":":
            break
        if name not in _REQUEST_PSEUDO:
            return f"pseudo-header {name[:64]!r} is not a request's", pseudo
        if name in pseudo:
            return f"pseudo-header {name.decode()!r} given twice", pseudo
        if name == b":path" and not value:
            return "an empty :path", pseudo
        pseudo[name] = value
    return None, pseudo


def _regular_fields(fields: Headers) -> tuple[str | None, int]:
    """Why a request's regular fields are malformed (None: they are not), and its
    content-length (-1: none)."""
    length = -1
    for name, value in fields:
        if name[:1] == b":":
            return f"pseudo-header {name.decode()!r} after a regular field", -1
        problem = _field_problem(name, value)
        if problem is not None:
            return problem, -1
        if name == b"content-length":
            if not value.isdigit() or length >= 0:
                return "a malformed or repeated content-length", -1
            length = int(value)
    return None, length


def _pseudo_set_problem(pseudo: dict[bytes, bytes]) -> str | None:
    """Why a request's set of pseudo-header fields is not one a request may have."""
    if pseudo.get(b":method") == b"CONNECT":
        if b":authority" not in pseudo or b":scheme" in pseudo or b":path" in pseudo:
            return "a CONNECT request takes :authority and no :scheme or :path"
    elif not {b":method", b":scheme", b":path"} <= pseudo.keys():
        return "a request needs :method, :scheme and :path"
    return None


def trailers_problem(headers: Headers) -> str | None:
    """Why a request's trailer fields are malformed (None: they are not)."""
    for name, value in headers:
        if name[:1] == b":":
            return f"pseudo-header {name[:64]!r} in trailers"
        problem = _field_problem(name, value)
        if problem is not None:
            return problem
    return None
