"""V2 datatypes, their numpy equivalents and Triton's TYPE_* names."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from inferplex.errors import InvalidInputError

#: V2 datatype name -> numpy dtype. BYTES is carried as a numpy object array of ``bytes``.
V2_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}

NUMPY_TO_V2: dict[np.dtype, str] = {v: k for k, v in V2_TO_NUMPY.items()}
NUMPY_TO_V2[np.dtype(np.bytes_)] = "BYTES"
NUMPY_TO_V2[np.dtype(np.str_)] = "BYTES"

V2_DATATYPES = frozenset(V2_TO_NUMPY)

#: Triton's config data_type names map to V2 names by dropping the prefix, except TYPE_STRING.
TRITON_TO_V2: dict[str, str] = {f"TYPE_{name}": name for name in V2_TO_NUMPY if name != "BYTES"}
TRITON_TO_V2["TYPE_STRING"] = "BYTES"
V2_TO_TRITON: dict[str, str] = {v: k for k, v in TRITON_TO_V2.items()}


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype for a V2 datatype name; InvalidInputError for an unknown name."""
    try:
        return V2_TO_NUMPY[datatype]
    except KeyError:
        raise InvalidInputError(
            f"unknown datatype '{datatype}', expected one of {', '.join(V2_TO_NUMPY)}"
        ) from None


def v2_datatype(dtype: np.dtype) -> str:
    """The V2 datatype name for a numpy dtype."""
    dtype = np.dtype(dtype)
    if dtype.kind in ("S", "U", "O"):
        return "BYTES"
    try:
        return NUMPY_TO_V2[dtype]
    except KeyError:
        raise InvalidInputError(f"numpy dtype {dtype} has no V2 datatype") from None


def element_size(datatype: str) -> int:
    """Bytes per element of a fixed-size datatype (BYTES has none: returns 0)."""
    return 0 if datatype == "BYTES" else V2_TO_NUMPY[datatype].itemsize


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def reshape_input(array: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``array`` in ``shape``; InvalidInputError naming the input when it does not fit."""
    try:
        return array.reshape(shape)
    except ValueError as exc:
        raise unusable_shape(name, shape, exc) from None


def unusable_shape(name: str, shape: tuple[int, ...], exc: ValueError) -> InvalidInputError:
    return InvalidInputError(f"input '{name}': shape {list(shape)} is not usable: {exc}")


def view_input(
    buffer: Any, dtype: np.dtype, shape: tuple[int, ...], name: str, offset: int = 0
) -> np.ndarray:
    """A read-only view of ``buffer`` from ``offset`` in ``shape`` (its size was checked);
    InvalidInputError naming the input when numpy cannot make the shape (e.g. dims whose
    product overflows beside a zero dim)."""
    try:
        return np.ndarray(shape, dtype, buffer, offset)
    except ValueError as exc:
        raise unusable_shape(name, shape, exc) from None


_LENGTH = struct.Struct("<I")


def deserialize_bytes(buffer: bytes | memoryview, count: int, name: str) -> np.ndarray:
    """Decode V2 binary BYTES data (each element a 4-byte little-endian length, then the bytes)."""
    view = memoryview(buffer)
    end = len(view)
    if count * 4 > end:
        # checked before allocating: a huge claimed count must not allocate a huge array
        raise InvalidInputError(
            f"input '{name}': {count} BYTES elements need at least {count * 4} bytes of data, "
            f"got {end}"
        )
    out = np.empty(count, dtype=np.object_)
    offset = 0
    for i in range(count):
        if offset + 4 > end:
            raise InvalidInputError(
                f"input '{name}': BYTES data ends after {i} of {count} elements"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > end:
            raise InvalidInputError(
                f"input '{name}': BYTES element {i} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        out[i] = bytes(view[offset : offset + length])
        offset += length
    if offset != end:
        raise InvalidInputError(
            f"input '{name}': BYTES data has {end - offset} bytes left over after {count} elements"
        )
    return out


def serialize_bytes(array: np.ndarray) -> bytes:
    """Encode an array of bytes/str elements in the V2 binary BYTES layout."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def to_bytes_elements(array: np.ndarray) -> np.ndarray:
    """Normalise a BYTES tensor to an object array of ``bytes`` (str is UTF-8 encoded)."""
    if array.dtype == np.object_ and all(isinstance(x, bytes) for x in array.flat):
        return array
    out = np.empty(array.shape, dtype=np.object_)
    for index, item in np.ndenumerate(array):
        out[index] = item.encode() if isinstance(item, str) else bytes(item)
    return out
