"""Pieces of the built-in gRPC server that need no socket: HPACK in and out, frames, the
grpc-timeout and grpc-message encodings. The wire behaviour is in
tests/integration/test_grpc_http2.py."""

from __future__ import annotations

import hpack
import pytest

from inferplex.frontends.grpc_server import _percent_encode, _timeout_seconds
from inferplex.frontends.http2 import Http2Error, _HeaderDecoder, frame, literal_header_block


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
    decoder = _HeaderDecoder(1 << 20)
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


def test_decoder_errors_are_connection_errors() -> None:
    with pytest.raises(Http2Error) as info:
        _HeaderDecoder(1 << 20).decode(b"\xbf\xff\xff")  # index far past both tables
    assert info.value.code == 0x9  # COMPRESSION_ERROR


def test_a_header_list_bomb_is_refused() -> None:
    encoder = hpack.Encoder()
    big = [(b"x-big", b"v" * 3000)]
    decoder = _HeaderDecoder(10_000)
    decoder.decode(encoder.encode(big))
    reference = encoder.encode(big)  # one byte referring to the 3 KB entry
    with pytest.raises(Http2Error):
        decoder.decode(reference * 50)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(b"1S", 1.0), (b"250m", 0.25), (b"5M", 300.0), (b"2H", 7200.0), (b"100u", 1e-4),
     (b"7n", 7e-9), (b"99999999S", 99999999.0)],
)  # fmt: skip
def test_grpc_timeout(value: bytes, seconds: float) -> None:
    assert _timeout_seconds(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"S", b"1", b"1x", b"-1S", b"123456789S", b"1.5S"])
def test_malformed_grpc_timeout_is_no_deadline(value: bytes) -> None:
    assert _timeout_seconds(value) is None


def test_grpc_message_percent_encoding() -> None:
    assert _percent_encode("plain text: ok") == b"plain text: ok"
    assert _percent_encode("100%") == b"100%25"
    assert _percent_encode("line\nbreak") == b"line%0Abreak"
    assert _percent_encode("µs") == b"%C2%B5s"
