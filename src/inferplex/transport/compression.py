"""Compressed bodies: gRPC messages (``grpc-encoding``) and HTTP requests and responses
(``Content-Encoding`` / ``Accept-Encoding``), gzip or deflate as Triton and its clients use
them ("deflate" is the zlib format). Request bodies are inflated by ``inflate.py``, within the
cap of what they were sent to."""

from __future__ import annotations

import zlib

#: zlib's window bits for each coding (31: gzip header and trailer; 15: zlib)
WBITS = {b"gzip": 31, b"deflate": 15}
CODINGS = tuple(WBITS)


def compress(data: bytes, coding: bytes) -> bytes:
    """``data`` compressed as ``coding`` (one of ``CODINGS``), at zlib's default level."""
    compressor = zlib.compressobj(wbits=WBITS[coding])
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
