"""HTTP/2 pieces both ends share (transport/http2_wire.py): frames, literal header blocks
out, HPACK decoding in (with its caches), padding and WINDOW_UPDATE increments."""

from __future__ import annotations

import hpack
import pytest

from inferplex.transport.http2_wire import (
    COMPRESSION_ERROR,
    FRAME_SIZE_ERROR,
    PADDED,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    HeaderDecoder,
    Http2Error,
    _without_dynamic_table,
    frame,
    header_fragment,
    literal_header_block,
    unpad,
    window_increment,
)


@pytest.mark.parametrize("size", [0, 5, 126, 127, 128, 300, 70_000])
def test_literal_header_blocks_decode_with_an_independent_decoder(size: int) -> None:
    headers = [(b":status", b"200"), (b"grpc-message", b"x" * size), (b"n" * size, b"v")]
    decoder = hpack.Decoder(max_header_list_size=1 << 20)
    assert decoder.decode(literal_header_block(headers), raw=True) == headers


def test_literal_blocks_leave_the_peer_table_alone() -> None:
    decoder = hpack.Decoder()
    decoder.decode(literal_header_block([(b"a", b"b")]), raw=True)
    assert len(decoder.header_table.dynamic_entries) == 0


def test_frame_header_layout() -> None:
    data = frame(0x1, 0x5, 7, b"abc")
    assert data[:3] == (3).to_bytes(3, "big")
    assert data[3:9] == bytes((0x1, 0x5)) + (7).to_bytes(4, "big")
    assert data[9:] == b"abc"
    assert frame(0x0, 0, 1, b"x" * 70_000)[:3] == (70_000).to_bytes(3, "big")


def test_decoder_cache_follows_the_dynamic_table() -> None:
    """A client's encoder indexes headers on first use and then refers to them: every block,
    cached or not, must decode as an independent decoder fed the same blocks decodes it,
    including a block of references repeated after literals have shifted the table."""
    encoder = hpack.Encoder()
    decoder = HeaderDecoder(1 << 20)
    reference = hpack.Decoder()
    first = [(b":path", b"/a"), (b"x-key", b"one")]
    second = [(b":path", b"/b"), (b"x-key", b"two")]
    repeat = b""
    for step, headers in enumerate([first, first, first, second, first, first]):
        block = encoder.encode(headers)
        if step == 1:
            repeat = block  # all references into the dynamic table as it stood then
        assert decoder.decode(block) == reference.decode(block, raw=True) == headers
    # the same reference bytes now point at other entries: the cache must not answer
    assert decoder.decode(repeat) == reference.decode(repeat, raw=True)


def test_blocks_that_leave_the_dynamic_table_alone_decode_once() -> None:
    """Static references and literals not indexed decode the same whatever the table holds:
    such a block is decoded once and answered from the cache for good, while blocks that
    index literals or refer to the table are not."""
    grpc_call = [(b":method", b"POST"), (b":path", b"/s/M"), (b"te", b"trailers")]
    lean = literal_header_block(grpc_call)  # new names, not indexed
    static_name = b"\x04\x04/s/M" + b"\x1f\x00\x01x"  # :path by static index; never indexed
    assert _without_dynamic_table(lean)
    assert _without_dynamic_table(b"\x83" + static_name)  # :method POST, static
    assert not _without_dynamic_table(b"\x40\x01a\x01b")  # incremental indexing
    assert not _without_dynamic_table(b"\x3f\xe1\x1f")  # a table size update
    assert not _without_dynamic_table(b"\xbe")  # index 62, the dynamic table's first
    assert not _without_dynamic_table(b"\x0f\x2f\x01v")  # a name at dynamic index 62
    encoder = hpack.Encoder()
    decoder = HeaderDecoder(1 << 20)
    reference = hpack.Decoder()
    for block in (lean, encoder.encode([(b"x-key", b"one")]), lean, b"\x83" + static_name, lean):
        assert decoder.decode(block) == reference.decode(block, raw=True)
    assert decoder.decode(lean) is decoder.decode(lean)  # from the cache


def test_decoder_errors_are_connection_errors() -> None:
    with pytest.raises(Http2Error) as info:
        HeaderDecoder(1 << 20).decode(b"\xbf\xff\xff")  # index far past both tables
    assert info.value.code == COMPRESSION_ERROR


def test_a_header_list_bomb_is_refused() -> None:
    encoder = hpack.Encoder()
    big = [(b"x-big", b"v" * 3000)]
    decoder = HeaderDecoder(10_000)
    decoder.decode(encoder.encode(big))
    reference = encoder.encode(big)  # one byte referring to the 3 KB entry
    with pytest.raises(Http2Error):
        decoder.decode(reference * 50)


@pytest.mark.parametrize("kind", [bytes, memoryview])
def test_unpad_drops_the_length_byte_and_the_padding(kind: type[bytes | memoryview]) -> None:
    assert bytes(unpad(kind(b"\x03abc\0\0\0"))) == b"abc"
    assert bytes(unpad(kind(b"\x00abc"))) == b"abc"
    assert isinstance(unpad(kind(b"\x01ab")), kind)  # a view stays a view: no copy


@pytest.mark.parametrize("payload", [b"", b"\x03ab", b"\x01"])
def test_padding_longer_than_the_frame_is_a_connection_error(payload: bytes) -> None:
    with pytest.raises(Http2Error) as info:
        unpad(payload)
    assert info.value.code == PROTOCOL_ERROR


def test_window_increments() -> None:
    assert window_increment(0, (1000).to_bytes(4, "big")) == 1000
    assert window_increment(3, (0x80000000 | 7).to_bytes(4, "big")) == 7  # reserved bit
    assert window_increment(3, bytes(4)) == 0  # the stream's error: the caller resets it
    for stream_id, payload, code in [
        (0, bytes(4), PROTOCOL_ERROR),
        (3, bytes(5), FRAME_SIZE_ERROR),
    ]:
        with pytest.raises(Http2Error) as info:
            window_increment(stream_id, payload)
        assert info.value.code == code


def test_a_header_fragment_loses_its_padding_and_priority() -> None:
    block = b"\x82\x86"
    assert header_fragment(0, block) == block
    assert header_fragment(PADDED, b"\x03" + block + b"\0\0\0") == block
    priority = b"\x00\x00\x00\x01\x10"
    assert header_fragment(PRIORITY_FLAG, priority + block) == block
    assert header_fragment(PADDED | PRIORITY_FLAG, b"\x01" + priority + block + b"\0") == block
    with pytest.raises(Http2Error):
        header_fragment(PRIORITY_FLAG, b"\x00\x00")
