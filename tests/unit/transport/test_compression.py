import gzip
import zlib

import pytest

from inferplex.errors import InvalidInputError
from inferplex.transport.compression import accepted, compress, decompress


@pytest.mark.parametrize(
    ("header", "coding"),
    [
        (b"gzip", b"gzip"),
        (b"deflate", b"deflate"),
        (b"deflate, gzip;q=0.8", b"gzip"),
        (b"GZIP;q=0, deflate", b"deflate"),
        (b"br", None),
        (b"identity", None),
        (b"*", b"gzip"),
        (b"gzip;q=bad", None),
        (b"", None),
    ],
)
def test_accepted_coding(header: bytes, coding: bytes | None) -> None:
    assert accepted(header) == coding


def test_round_trips_match_the_standard_formats() -> None:
    data = b"inferplex " * 100
    assert gzip.decompress(compress(data, b"gzip")) == data
    assert zlib.decompress(compress(data, b"deflate")) == data
    assert decompress(memoryview(gzip.compress(data)), b"gzip", len(data), "x") == data


def test_decompression_stops_past_the_limit() -> None:
    plain = decompress(gzip.compress(b"\0" * 10_000_000), b"gzip", 1000, "x")
    assert len(plain) == 1001


def test_corrupt_data_names_what_it_was() -> None:
    with pytest.raises(InvalidInputError, match="the gzip body could not be read"):
        decompress(b"\x1f\x8bnope", b"gzip", 100, "the gzip body")
