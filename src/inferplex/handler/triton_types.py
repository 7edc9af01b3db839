"""Triton's datatype helpers of ``triton_python_backend_utils``: config type names and
TRITONSERVER_DataType numbers to numpy types and back, and the length-prefixed layout of a
BYTES tensor (Triton's ``serialize_byte_tensor`` / ``deserialize_bytes_tensor``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferplex.datatypes import TRITON_TO_V2, V2_TO_NUMPY, deserialize_bytes, serialize_bytes


class TritonModelException(Exception):
    """What Triton raises for errors in its utilities."""


#: config ``data_type`` -> numpy type, as Triton's module has it (``TYPE_BOOL`` is ``bool``)
TRITON_STRING_TO_NUMPY: dict[str, type] = {
    name: V2_TO_NUMPY[v2].type for name, v2 in TRITON_TO_V2.items()
}
TRITON_STRING_TO_NUMPY["TYPE_BOOL"] = bool

#: TRITONSERVER_DataType numbers (BOOL = 1 ... BYTES = 13) in Triton's order
_BY_NUMBER: tuple[type, ...] = (
    *(np.bool_, np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32),
    *(np.int64, np.float16, np.float32, np.float64, np.object_),
)


def triton_string_to_numpy(triton_type_string: str) -> type:
    """``"TYPE_FP32"`` -> ``numpy.float32`` (``TYPE_STRING`` -> ``numpy.object_``)."""
    try:
        return TRITON_STRING_TO_NUMPY[triton_type_string]
    except KeyError:
        raise TritonModelException(f"unknown Triton data type '{triton_type_string}'") from None


def triton_to_numpy_type(data_type: int) -> type | None:
    """A TRITONSERVER_DataType number -> the numpy type (None for an unknown number)."""
    return _BY_NUMBER[data_type - 1] if 1 <= data_type <= len(_BY_NUMBER) else None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy type -> its TRITONSERVER_DataType number (``bytes_`` is BYTES, 13)."""
    if data_type is np.bytes_:
        return len(_BY_NUMBER)
    for number, known in enumerate(_BY_NUMBER, start=1):
        if data_type is known or np.dtype(data_type) == np.dtype(known):
            return number
    return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """An object or ``S`` array as the BYTES layout (4-byte little-endian length, then the
    bytes, row-major); ``()`` for an empty array and None for any other dtype, as Triton's."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype.kind not in ("O", "S"):
        return None
    if input_tensor.dtype.kind == "O":
        # Triton's own: an element that is not bytes is written as its str(), UTF-8 encoded
        items = [x if isinstance(x, bytes) else str(x).encode() for x in input_tensor.flat]
        input_tensor = np.array(items, dtype=np.object_)
    return serialize_bytes(input_tensor)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The BYTES layout back to a flat object array of ``bytes``."""
    view = memoryview(encoded_tensor)
    count = 0
    offset = 0
    while offset < len(view):  # count the elements: deserialize_bytes wants the count
        offset += 4 + int.from_bytes(view[offset : offset + 4], "little")
        count += 1
    return deserialize_bytes(view, count, "tensor")
