"""What the HTTP/1.1 server finds wrong with a request's head, and the words it answers each
bound with (``http_limits.REASONS`` lists the reasons; docs/security.md the bounds): kept
apart from the connection (http_connection.py) so that each answer is written once and the
checks of a header block are a pure function of it."""

from __future__ import annotations

from typing import NamedTuple

import orjson

from inferplex.transport.http_cycle import Refusal

__all__ = [
    "BUFFER_FULL",
    "HeadFields",
    "Problem",
    "body_timeout",
    "body_too_large",
    "head_fields",
    "head_problem",
    "head_too_large",
    "header_timeout",
    "malformed",
    "uri_too_long",
    "version_refused",
]

_HEADER_FLAG = "INFERPLEX_MAX_HEADER_BYTES"


class Problem(NamedTuple):
    """Why a request is refused: its reason (``http_limits.REASONS``), status and message."""

    reason: str
    status: int
    message: str


#: what the server reads of a header block besides the application: (Content-Length (None:
#: none, or not digits: the parser refuses the latter), chunked, Expect: 100-continue, the
#: number of Host fields, a Transfer-Encoding other than one ``chunked`` (None: none)). A
#: plain tuple, unpacked at once: building a NamedTuple per request cost a microsecond
HeadFields = tuple[int | None, bool, bool, int, bytes | None]


#: the answer to a body the server has no room for now
BUFFER_FULL = Refusal(
    503,
    orjson.dumps(
        {
            "error": "the server holds too many request bytes to read this body now "
            "(INFERPLEX_MAX_BUFFERED_BYTES): retry later"
        }
    ),
    [(b"retry-after", b"1")],
)


def head_fields(headers: list[tuple[bytes, bytes]]) -> HeadFields:
    """The fields of ``headers`` (names lower-case) the server itself acts on."""
    length = coding = None
    expect_continue = chunked = False
    hosts = 0
    for name, value in headers:
        if name == b"content-length" and value.isdigit():
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"expect" and value.lower() == b"100-continue":
            expect_continue = True
        elif name == b"transfer-encoding":
            if chunked or value.strip().lower() != b"chunked":
                coding = value  # a coding besides chunked, or chunked twice
            chunked = True
    return length, chunked, expect_continue, hosts, coding


def head_problem(version: str, hosts: int, coding: bytes | None) -> Problem | None:
    """Why a complete header block of HTTP ``version`` with ``hosts`` Host fields and the
    Transfer-Encoding ``coding`` (see HeadFields) is refused (None: it is not)."""
    if version != "1.1" and version != "1.0":
        return version_refused(f"HTTP/{version}")
    if hosts != 1 and (hosts or version != "1.0"):
        # RFC 9112 3.2: an HTTP/1.1 request names its host once, and no request twice
        return Problem("missing_host", 400, f"{hosts} Host headers: send exactly one")
    if coding is not None:  # RFC 9112 6.1: a coding the server does not understand
        return Problem(
            "transfer_coding",
            501,
            f"Transfer-Encoding '{coding.decode('latin-1')}' is not implemented: send "
            "the body chunked or with Content-Length (Content-Encoding: gzip compresses it)",
        )
    return None


def version_refused(version: str) -> Problem:
    return Problem(
        "http_version",
        505,
        f"{version} is not served here: use HTTP/1.1 (HTTP/2 is the gRPC port's)",
    )


def malformed(message: str) -> Problem:
    """A parser's error ``message`` as the answer to the bytes it refused."""
    if "PRI" in message:  # the HTTP/2 connection preface
        return Problem(
            "http_version", 505, "HTTP/2 is not served here: use HTTP/1.1 or the gRPC port"
        )
    if "HTTP version" in message:
        return Problem("http_version", 505, f"{message}: use HTTP/1.1")
    return Problem("malformed", 400, f"malformed HTTP request: {message}")


def uri_too_long(limit: int) -> Problem:
    return Problem(
        "uri_too_long",
        414,
        f"the request line is above the limit of {limit} bytes ({_HEADER_FLAG})",
    )


def head_too_large(limit: int) -> Problem:
    return Problem(
        "header_too_large",
        431,
        f"request headers are above the limit of {limit} bytes ({_HEADER_FLAG})",
    )


def body_too_large(size: str, limit: int, flag: str) -> Problem:
    return Problem(
        "body_too_large",
        413,
        f"request body of {size} is above the limit of {limit} bytes ({flag})",
    )


def header_timeout(seconds: float) -> Problem:
    return Problem(
        "header_timeout",
        408,
        f"the request's header block took more than {seconds} s (INFERPLEX_HTTP_HEADER_TIMEOUT_S)",
    )


def body_timeout(received: int, elapsed: float, min_rate: int) -> Problem:
    return Problem(
        "body_timeout",
        408,
        f"the request body came at {received / elapsed:.0f} bytes/s over {elapsed:.0f} s, "
        f"below the minimum of {min_rate} "
        "(INFERPLEX_HTTP_BODY_MIN_RATE, INFERPLEX_HTTP_BODY_TIMEOUT_S)",
    )
