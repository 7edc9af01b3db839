import asyncio
import gzip
import threading
import zlib

import pytest

from inferplex.errors import InvalidInputError, PayloadTooLargeError, ServerBusyError
from inferplex.transport import inflate as inflating
from inferplex.transport.compression import accepted, compress
from inferplex.transport.grpcio_messages import plain
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import INLINE_INFLATE_BYTES, inflate


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


def _too_large() -> PayloadTooLargeError:
    return PayloadTooLargeError("too large (LIMIT)")


def _inflate(data: bytes, coding: bytes, limit: int, budget: ByteBudget) -> inflating.Inflated:
    return asyncio.run(inflate(data, coding, limit, budget, "the body", _too_large))


def test_round_trips_match_the_standard_formats() -> None:
    data = b"inferplex " * 100_000  # 1 MB: above the inline size, inflated in a thread
    assert gzip.decompress(compress(data, b"gzip")) == data
    assert zlib.decompress(compress(data, b"deflate")) == data
    budget = ByteBudget(0)
    for coding in (b"gzip", b"deflate"):
        inflated = _inflate(compress(data, coding), coding, len(data), budget)
        assert bytes(inflated.data) == data
        assert budget.used == len(data)  # charged until the request is answered
        inflated.release()
        assert budget.used == 0


def test_inflation_stops_past_the_limit_and_gives_its_charge_back() -> None:
    budget = ByteBudget(0)
    bomb = gzip.compress(bytes(50_000_000))
    for limit in (1000, INLINE_INFLATE_BYTES + 1, 6 << 20):
        with pytest.raises(PayloadTooLargeError, match="LIMIT"):
            _inflate(bomb, b"gzip", limit, budget)
        assert budget.used == 0


def test_inflation_is_charged_before_it_is_made() -> None:
    """A budget without room for the next step refuses it: the bytes are never made."""
    budget = ByteBudget(3 << 20)
    budget.used = 1 << 20
    data = bytes(10 << 20)
    with pytest.raises(ServerBusyError, match="INFERPLEX_MAX_BUFFERED_BYTES"):
        _inflate(gzip.compress(data), b"gzip", 256 << 20, budget)
    assert budget.used == 1 << 20


def test_a_large_limit_inflates_in_a_worker_thread_a_small_one_on_the_loop() -> None:
    threads: list[str] = []
    step = inflating._step

    def spy(*args: object) -> int:
        threads.append(threading.current_thread().name)
        return step(*args)  # type: ignore[arg-type]

    inflating._step = spy  # type: ignore[assignment]
    try:
        small = compress(b"x" * 100, b"gzip")
        _inflate(small, b"gzip", INLINE_INFLATE_BYTES, ByteBudget(0))
        assert threads == [threading.current_thread().name]
        threads.clear()
        _inflate(small, b"gzip", INLINE_INFLATE_BYTES + 1, ByteBudget(0))
        assert threads and threading.current_thread().name not in threads
    finally:
        inflating._step = step  # type: ignore[assignment]


@pytest.mark.parametrize("data", [b"\x1f\x8bnope", gzip.compress(bytes(100_000))[:-20]])
def test_corrupt_or_truncated_data_names_what_it_was(data: bytes) -> None:
    budget = ByteBudget(0)
    with pytest.raises(InvalidInputError, match="the body could not be read"):
        _inflate(data, b"gzip", 1 << 20, budget)
    assert budget.used == 0


def _plain(message: bytes, limit: int = 1 << 20) -> tuple[bytes, bool]:
    data, inflated = asyncio.run(plain(message, limit, 1 << 30, ByteBudget(0)))
    if inflated is not None:
        inflated.release()
    return bytes(data), inflated is not None


def test_the_grpcio_twin_recognises_compressed_messages_by_their_first_bytes() -> None:
    message = b"\x0a\x07add_sub" * 100
    assert _plain(message) == (message, False)
    assert _plain(gzip.compress(message)) == (message, True)
    assert _plain(zlib.compress(message)) == (message, True)
    # begins like a zlib stream (78 9c) but is a protobuf message (an unknown field 15)
    assert _plain(b"\x78\x9c\x01" + message) == (b"\x78\x9c\x01" + message, False)
    with pytest.raises(InvalidInputError):  # gzip's magic cannot begin a protobuf message
        _plain(b"\x1f\x8b" + message)


def test_the_grpcio_twin_bounds_compressed_and_inflated_size() -> None:
    with pytest.raises(PayloadTooLargeError, match="INFERPLEX_MAX_SMALL_REQUEST_BYTES"):
        _plain(bytes(20_000), limit=16_384)  # as it came
    with pytest.raises(PayloadTooLargeError, match="INFERPLEX_MAX_SMALL_REQUEST_BYTES"):
        _plain(gzip.compress(bytes(1 << 20)), limit=16_384)  # as it inflates
