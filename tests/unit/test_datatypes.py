import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferplex import datatypes
from inferplex.errors import InvalidInputError


@pytest.mark.parametrize("name", sorted(datatypes.V2_DATATYPES))
def test_v2_numpy_round_trip(name: str) -> None:
    assert datatypes.v2_datatype(datatypes.numpy_dtype(name)) == name


def test_triton_names_map_both_ways() -> None:
    assert datatypes.TRITON_TO_V2["TYPE_STRING"] == "BYTES"
    assert datatypes.TRITON_TO_V2["TYPE_FP16"] == "FP16"
    assert all(datatypes.TRITON_TO_V2[t] == v for v, t in datatypes.V2_TO_TRITON.items())


def test_unknown_datatype_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="unknown datatype 'FLOAT'"):
        datatypes.numpy_dtype("FLOAT")


@given(st.lists(st.binary(max_size=40), max_size=20))
def test_bytes_serialisation_round_trips(items: list[bytes]) -> None:
    array = np.array([*items, b""], dtype=np.object_)
    encoded = datatypes.serialize_bytes(array)
    decoded = datatypes.deserialize_bytes(encoded, len(array), "x")
    assert decoded.tolist() == array.tolist()


@pytest.mark.parametrize(
    ("data", "count", "fragment"),
    [
        (b"\x05\x00\x00\x00abc", 1, "declares 5 bytes"),
        (b"\x01\x00", 1, "1 BYTES elements need at least 4 bytes of data, got 2"),
        (b"\x02\x00\x00\x00ab\x00\x00", 2, "ends after 1 of 2"),
        (b"\x01\x00\x00\x00ab", 1, "1 bytes left over"),
    ],
)
def test_bad_bytes_layout_is_reported(data: bytes, count: int, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        datatypes.deserialize_bytes(data, count, "x")


def test_str_elements_are_utf8_encoded() -> None:
    out = datatypes.to_bytes_elements(np.array(["é", "b"], dtype=object))
    assert out.tolist() == ["é".encode(), b"b"]
