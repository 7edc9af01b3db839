"""The V2 BYTES codec (length-prefixed elements) against a plain reference implementation,
and the promise that makes it safe on large tensors: no Python code runs per element."""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplex import datatypes
from inferplex.datatypes import deserialize_bytes, serialize_bytes, to_bytes_elements
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.rest_json import array_from_json, strings_to_json
from inferplex.security.limits import RequestLimits
from inferplex.types import InferenceRequest, Tensor


def reference_decode(data: bytes, count: int, name: str) -> list[bytes]:
    """The layout read one element at a time, with the codec's messages."""
    end = len(data)
    if count * 4 > end:
        raise InvalidInputError(
            f"input '{name}': {count} BYTES elements need at least {count * 4} bytes of data, "
            f"got {end}"
        )
    out = []
    offset = 0
    for i in range(count):
        if offset + 4 > end:
            raise InvalidInputError(
                f"input '{name}': BYTES data ends after {i} of {count} elements"
            )
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + length > end:
            raise InvalidInputError(
                f"input '{name}': BYTES element {i} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        out.append(data[offset : offset + length])
        offset += length
    if offset != end:
        raise InvalidInputError(
            f"input '{name}': BYTES data has {end - offset} bytes left over after {count} elements"
        )
    return out


def reference_encode(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def objects(items: list[Any]) -> np.ndarray:
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


def decoded_or_error(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except InvalidInputError as exc:
        return ("error", exc.message)


# -- round trips and malformed layouts, against the reference ----------------------------


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=24), max_size=300))
def test_round_trip_matches_the_reference(items: list[bytes]) -> None:
    encoded = serialize_bytes(objects(items))
    assert encoded == reference_encode(items)
    decoded = deserialize_bytes(encoded, len(items), "x")
    assert decoded.dtype == np.object_
    assert decoded.tolist() == items
    assert all(type(item) is bytes for item in decoded)


@settings(max_examples=60)
@given(st.lists(st.integers(0, 70_000), min_size=1, max_size=8), st.integers(0, 2000))
def test_elements_across_walk_windows(long: list[int], short: int) -> None:
    """Elements longer than the walk's window, and runs of small ones around them."""
    items = [bytes([n % 251]) * n for n in long]
    items = [b"ab" * (i % 3) for i in range(short)] + items + [b"z"] * short
    encoded = reference_encode(items)
    assert deserialize_bytes(encoded, len(items), "x").tolist() == items


@settings(max_examples=500)
@given(st.binary(max_size=64), st.integers(0, 20))
def test_any_buffer_decodes_or_fails_as_the_reference_does(data: bytes, count: int) -> None:
    mine = decoded_or_error(lambda: deserialize_bytes(data, count, "x").tolist())
    assert mine == decoded_or_error(lambda: reference_decode(data, count, "x"))


@settings(max_examples=300)
@given(
    st.lists(st.binary(max_size=12), min_size=1, max_size=40),
    st.integers(-3, 3),
    st.data(),
)
def test_valid_data_with_a_wrong_count_or_a_damaged_prefix(
    items: list[bytes], skew: int, data: st.DataObject
) -> None:
    encoded = bytearray(reference_encode(items))
    if data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(encoded) - 1))
        encoded[position] = data.draw(st.integers(0, 255))
    count = max(0, len(items) + skew)
    mine = decoded_or_error(lambda: deserialize_bytes(bytes(encoded), count, "x").tolist())
    assert mine == decoded_or_error(lambda: reference_decode(bytes(encoded), count, "x"))


@pytest.mark.parametrize(
    "lengths",
    [
        [0] * 1000,  # all alike: one strided comparison
        [7] * 1000,
        [0, 3] * 600,  # few distinct lengths: cut by group
        list(range(20)) * 40,  # many: cut one slice each
        [300, 0] * 300,  # long ones: cut one slice each
    ],
)
def test_every_way_of_cutting_keeps_every_byte(lengths: list[int]) -> None:
    """Trailing NULs included (numpy's 'S' type would drop them)."""
    items = [bytes([i % 256]) * (n - 1) + b"\x00" if n else b"" for i, n in enumerate(lengths)]
    encoded = reference_encode(items)
    assert deserialize_bytes(encoded, len(items), "x").tolist() == items
    assert deserialize_bytes(memoryview(encoded), len(items), "x").tolist() == items


def test_a_count_far_below_the_data_is_refused_after_that_many_elements() -> None:
    """A body claiming 4 elements but holding 4 M: the walk stops at 4."""
    refused = pytest.raises(InvalidInputError, match="left over after 4 elements")
    with count_python_lines(datatypes) as lines, refused:
        deserialize_bytes(bytes(16_000_000), 4, "x")
    assert lines() < 200


def test_a_count_beyond_the_data_is_refused_before_allocating() -> None:
    with pytest.raises(InvalidInputError, match="need at least 40000000000 bytes"):
        deserialize_bytes(bytes(16), 10_000_000_000, "x")


def test_str_and_numpy_string_elements_are_encoded_as_utf8() -> None:
    assert serialize_bytes(np.array(["é", "b"])) == reference_encode(["é".encode(), b"b"])
    mixed = objects(["é", b"\x00", np.bytes_(b"n")])
    assert to_bytes_elements(mixed).tolist() == ["é".encode(), b"\x00", b"n"]
    assert serialize_bytes(objects([])) == b""


# -- no Python code per element ------------------------------------------------------------


@contextmanager
def count_python_lines(*modules: Any) -> Iterator[Callable[[], int]]:
    """Counts the Python lines the given modules run in this thread meanwhile."""
    files = {module.__file__ for module in modules}
    lines = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if frame.f_code.co_filename not in files:
            return None
        if event == "line":
            lines += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        yield lambda: lines
    finally:
        sys.settrace(previous)


#: elements of the tensors below, and the most Python lines their coding may run: a few per
#: window of the walk and per chunk of elements, none per element
ELEMENTS = 200_000
LINES = 3_000


def mixed_items() -> list[bytes]:
    return [b"x" * (i % 5) for i in range(ELEMENTS - 3)] + [b"y" * 400, b"", b"z" * 70_000]


@pytest.mark.parametrize(
    "items",
    [[b""] * ELEMENTS, [b"abc"] * ELEMENTS, mixed_items()],
    ids=["empty", "alike", "mixed"],
)
def test_decoding_runs_no_python_per_element(items: list[bytes]) -> None:
    encoded = reference_encode(items)
    with count_python_lines(datatypes) as lines:
        decoded = deserialize_bytes(encoded, len(items), "x")
    assert lines() < LINES
    assert decoded.tolist() == items


def test_encoding_runs_no_python_per_element() -> None:
    items = mixed_items()
    texts = objects([item.decode() for item in items])
    with count_python_lines(datatypes) as lines:
        encoded = serialize_bytes(objects(items))
        from_text = serialize_bytes(texts)
        normalised = to_bytes_elements(texts)
    assert lines() < LINES
    assert encoded == from_text == reference_encode(items)
    assert normalised.tolist() == items


def test_limits_and_json_strings_run_no_python_per_element() -> None:
    from inferplex.protocol.v2 import rest_json
    from inferplex.security import limits as limits_module

    items = mixed_items()
    array = objects(items)
    limits = RequestLimits(10 * ELEMENTS, 100)
    request = InferenceRequest("m", [Tensor("x", "BYTES", (ELEMENTS,), array)])
    data = [[item.decode() for item in items[i : i + 4]] for i in range(0, ELEMENTS, 4)]
    with count_python_lines(datatypes, rest_json, limits_module) as lines:
        with pytest.raises(PayloadTooLargeError, match="element of 70000 bytes"):
            limits.check(request)
        texts = strings_to_json("y", array)
        parsed = array_from_json(data, "BYTES", np.dtype(object), (ELEMENTS,), ELEMENTS, "x")
    assert lines() < LINES
    assert texts == [item.decode() for item in items]
    assert parsed.tolist() == items
