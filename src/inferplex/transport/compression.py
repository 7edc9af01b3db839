"""Compressed bodies: gRPC messages (``grpc-encoding``) and HTTP requests and responses
(``Content-Encoding`` / ``Accept-Encoding``), gzip or deflate as Triton and its clients use
them ("deflate" is the zlib format)."""

from __future__ import annotations

import zlib

from inferplex.errors import InvalidInputError

#: zlib's window bits for each coding (31: gzip header and trailer; 15: zlib)
_WBITS = {b"gzip": 31, b"deflate": 15}
CODINGS = tuple(_WBITS)


def decompress(data: bytes | memoryview, coding: bytes, limit: int, what: str) -> bytes:
    """``data`` decompressed, at most ``limit + 1`` bytes of it (the caller refuses more than
    ``limit`` without the rest ever being inflated); InvalidInputError naming ``what`` (e.g.
    "the gzip request body") when it is not valid ``coding``."""
    try:
        return zlib.decompressobj(_WBITS[coding]).decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidInputError(f"{what} could not be read: {exc}") from None


def compress(data: bytes, coding: bytes) -> bytes:
    """``data`` compressed as ``coding`` (one of ``CODINGS``), at zlib's default level."""
    compressor = zlib.compressobj(wbits=_WBITS[coding])
    return compressor.compress(data) + compressor.flush()


def accepted(header: bytes) -> bytes | None:
    """The coding to answer with for an ``Accept-Encoding`` header: gzip, else deflate,
    whichever the client accepts (a ``q=0`` refuses one); None: send it uncompressed."""
    offered: set[bytes] = set()
    for item in header.lower().split(b","):
        coding, _, parameters = item.partition(b";")
        quality = parameters.strip()
        if quality.startswith(b"q="):
            try:
                if float(quality[2:]) <= 0:
                    continue
            except ValueError:
                continue
        offered.add(coding.strip())
    for coding in CODINGS:
        if coding in offered:
            return coding
    return b"gzip" if b"*" in offered else None
