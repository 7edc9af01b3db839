"""The body of a V2 REST request (frontends/http.py): its headers, its size against the limit of
its endpoint, and its inflation when it comes compressed.

Every POST endpoint takes a body of at most its limit: inference and loads
``--max-request-bytes``, the others ``--max-small-request-bytes``; a GET endpoint takes none.
A compressed body is inflated within the same limit (transport/inflate.py).
"""

from __future__ import annotations

from inferplex.errors import InvalidInputError, PayloadTooLargeError, UnsupportedError
from inferplex.frontends.http_routes import Endpoint
from inferplex.transport.compression import CODINGS
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated, inflate

__all__ = [
    "body_headers",
    "inflate_body",
    "json_too_large",
    "too_large",
]

Headers = list[tuple[bytes, bytes]]
#: a request body: a large one is a memoryview of the buffer the server read it into
Body = bytes | memoryview


# one pass over the headers of every request with a body
def body_headers(
    headers: Headers, limit: int, flag: str, json_limit: int = 0
) -> tuple[bytes | None, bytes | None, bytes | None]:
    """The raw ``Inference-Header-Content-Length``, the ``Content-Encoding`` (None for
    identity) and the ``Accept-Encoding`` of a request with a body; a declared length
    above ``limit`` is refused (413, naming ``flag``) before any of the body is read, and
    so is JSON declared above ``json_limit`` (an inference body's: 0, not checked)."""
    header_length = coding = accept = None
    length = 0
    for key, value in headers:
        if key == b"content-length":
            length = _content_length(value, limit, flag)
        elif key == b"inference-header-content-length":
            header_length = value
            if json_limit and value.isdigit() and int(value) > json_limit:
                raise json_too_large(int(value), json_limit)
        elif key == b"content-encoding":
            coding = _coding(value)
        elif key == b"accept-encoding":
            accept = value
    if json_limit and length > json_limit and header_length is None and coding is None:
        raise json_too_large(length, json_limit)
    return header_length, coding, accept


def _content_length(value: bytes, limit: int, flag: str) -> int:
    """A Content-Length value, at most ``limit``."""
    if not value.isdigit():
        raise InvalidInputError(
            f"header Content-Length is not a number: '{value.decode(errors='replace')}'"
        )
    length = int(value)
    if length > limit:
        raise too_large(f"Content-Length {length}", limit, flag)
    return length


def _coding(value: bytes) -> bytes | None:
    """A Content-Encoding the server inflates (None: identity)."""
    coding = value.strip().lower()
    if coding == b"identity":
        return None
    if coding not in CODINGS:
        raise UnsupportedError(
            f"Content-Encoding {value.decode(errors='replace')} is not supported: "
            "send the request body as gzip, deflate or uncompressed"
        )
    return coding


def json_too_large(size: int, limit: int) -> PayloadTooLargeError:
    """An inference request whose JSON is above ``--max-json-request-bytes``: parsed, JSON
    takes 10-20 times its size in Python objects. Worded as Triton words its
    --http-max-input-size refusal (Triton's tests look for it)."""
    return PayloadTooLargeError(
        f"request JSON size of {size} bytes exceeds the maximum allowed input size of {limit} "
        "bytes (--max-json-request-bytes, INFERPLEX_MAX_JSON_REQUEST_BYTES): send large tensors as "
        "binary data (the binary tensor data extension: Inference-Header-Content-Length, "
        "binary_data_size)"
    )


async def inflate_body(
    body: Body, coding: bytes, limit: int, flag: str, budget: ByteBudget
) -> Inflated:
    """A compressed body inflated within ``limit``, charged to the server's budget (off
    the event loop where the limit allows much: ``transport/inflate.py``)."""
    return await inflate(
        body,
        coding,
        limit,
        budget,
        f"the {coding.decode()} request body",
        lambda: too_large(f"more than {limit} bytes once decompressed", limit, flag),
    )


def too_large(what: str, limit: int, flag: str) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"request body of {what} is above the limit of {limit} bytes ({flag})"
    )


def takes_none(path: str, endpoint: Endpoint) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"{endpoint.method} {path} takes no request body: send it without one"
    )
