"""HTTP/2 on the wire, for both ends: the protocol's numbers and frame layout (RFC 9113),
header blocks out (literals that index nothing) and in (HPACK decoding, with a cache for
the blocks a peer repeating itself sends), and the connection error both ends answer with
GOAWAY. The server's connection (transport/http2.py) and the load generator's client
(benchtool/grpc_wire.py) build their streams and flow control on these pieces.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import TypeVar, cast

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20
# error codes
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB
# settings
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

DEFAULT_WINDOW = 65_535
MAX_WINDOW = 2**31 - 1
MIN_FRAME_SIZE = 16_384
MAX_FRAME_SIZE_LIMIT = 2**24 - 1

# A module that calls these structs' methods on a hot path binds them to names of its own
# first (see http2.py): a method called on an imported name costs a bound method per call.
FRAME_HEADER = struct.Struct(">BHBBL")  # length as 8 + 16 bits, type, flags, stream id
SETTING = struct.Struct(">HL")
U32 = struct.Struct(">L")

Headers = list[tuple[bytes, bytes]]
#: what a decoder's ``check`` says of a header list (the server's: a problem or None, and the
#: content-length or -1), kept with the list for the blocks it caches
Verdict = tuple[str | None, int]
_UNCHECKED: Verdict = (None, -1)
_Payload = TypeVar("_Payload", bytes, memoryview)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: 9-byte header and payload."""
    length = len(payload)
    return FRAME_HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id) + payload


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) with ``first``'s high bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal_header_block(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals 'without indexing' and new names (RFC 7541 6.2.2):
    no dynamic table, no Huffman, so any decoder reads it whatever state it is in."""
    parts = []
    for name, value in headers:
        parts.append(b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value)
    return b"".join(parts)


class Http2Error(Exception):
    """A connection error: GOAWAY with ``code``, then the connection closes."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def unpad(payload: _Payload) -> _Payload:
    """A PADDED frame's payload without its pad length byte and padding (RFC 9113 6.1)."""
    if not payload or payload[0] >= len(payload):
        raise Http2Error(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - payload[0]]


def header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's piece of its header block: the payload without its padding and its
    priority fields."""
    if flags & PADDED:
        payload = unpad(payload)
    if flags & PRIORITY_FLAG:
        if len(payload) < 5:
            raise Http2Error(PROTOCOL_ERROR, "a malformed HEADERS priority")
        payload = payload[5:]
    return payload


def window_increment(stream_id: int, payload: bytes) -> int:
    """A WINDOW_UPDATE's increment (RFC 9113 6.9). A malformed frame, or an increment of 0
    on the connection, is a connection error; 0 on a stream is left to the caller (it is
    that stream's error)."""
    if len(payload) != 4:
        raise Http2Error(FRAME_SIZE_ERROR, "a WINDOW_UPDATE not of 4 bytes")
    increment: int = U32.unpack(payload)[0] & 0x7FFFFFFF
    if increment == 0 and stream_id == 0:
        raise Http2Error(PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0")
    return increment


class HeaderDecoder:
    """HPACK decoding with a cache for the blocks a peer repeating itself sends. Two kinds
    change no decoder state: blocks of indexed fields only (they may refer to the dynamic
    table, so they are kept until a block changes it), and blocks that neither touch nor
    refer to the dynamic table (static-table references and literals that are not indexed,
    as our own load generator, our server and other lean peers send: kept for good).

    ``check`` (a server's request rules) runs once per header list decoded; its verdict is
    cached with the list, so a repeated block is not checked again."""

    def __init__(
        self, max_header_list_bytes: int, check: Callable[[Headers], Verdict] | None = None
    ) -> None:
        self._decoder = hpack.Decoder()
        # past this limit, where a small block of references expands into a huge list, the
        # connection is failed (a server applies its own lower limit per stream)
        self._decoder.max_header_list_size = max_header_list_bytes
        self._check = check
        self._indexed: dict[bytes, tuple[Headers, Verdict]] = {}
        self._static: dict[bytes, tuple[Headers, Verdict]] = {}

    def decode(self, block: bytes) -> Headers:
        """The header list of ``block``; every block a peer sends must be decoded, in order,
        to keep the HPACK state in step (Http2Error COMPRESSION_ERROR if it cannot be)."""
        return self.decode_checked(block)[0]

    def decode_checked(self, block: bytes) -> tuple[Headers, Verdict]:
        """``decode``, and what ``check`` says of the list."""
        cached = self._static.get(block) or self._indexed.get(block)
        if cached is not None:
            return cached
        try:
            headers = cast(Headers, self._decoder.decode(block, raw=True))
        except (hpack.HPACKError, ValueError, IndexError) as exc:
            message = f"a header block could not be decoded: {exc}"
            raise Http2Error(COMPRESSION_ERROR, message) from None
        entry = (headers, self._check(headers) if self._check is not None else _UNCHECKED)
        if _without_dynamic_table(block):
            _keep(self._static, block, entry)
        elif all(byte & 0x80 and byte != 0xFF for byte in block):
            _keep(self._indexed, block, entry)
        else:  # literals may have changed the dynamic table
            self._indexed.clear()
        return entry


def _keep(
    cache: dict[bytes, tuple[Headers, Verdict]], block: bytes, entry: tuple[Headers, Verdict]
) -> None:
    if len(cache) > 64:
        cache.clear()
    cache[block] = entry


_STATIC_ENTRIES = 61  # HPACK's static table (RFC 7541 appendix A)


def _without_dynamic_table(block: bytes) -> bool:
    """Whether every field of a (decodable) header block is a static-table reference or a
    literal not indexed whose name is new or a static-table reference (RFC 7541 6.1, 6.2.2,
    6.2.3): such a block decodes the same whatever the decoder's state, and changes none."""
    pos, end = 0, len(block)
    while pos < end:
        first = block[pos]
        if first & 0x80:  # indexed field
            index, pos = _hpack_integer(block, pos, 7)
            if index > _STATIC_ENTRIES:
                return False
        elif first & 0xE0 == 0:  # a literal without indexing (0000) or never indexed (0001)
            index, pos = _hpack_integer(block, pos, 4)
            if index > _STATIC_ENTRIES:
                return False
            for _ in range(1 if index else 2):  # the value, after a new name
                length, pos = _hpack_integer(block, pos, 7)
                pos += length
        else:  # literal with incremental indexing, or a table size update
            return False
    return True


def _hpack_integer(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """The HPACK integer at ``pos`` (RFC 7541 5.1) and where it ends."""
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value == limit:
        shift = 0
        while True:
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
    return value, pos
