"""V2 datatypes, their numpy equivalents and Triton's TYPE_* names."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from itertools import islice, takewhile
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

#: bytes of the buffer whose length prefixes the general walk reads per numpy pass
_WALK_WINDOW = 1 << 16
#: position + 4 for each position of a window: added to the lengths read there, it gives
#: where the next element would start
_STEPS = np.arange(4, _WALK_WINDOW + 4, dtype=np.int64)
#: elements turned into or from Python objects per C-level call: a few milliseconds of work,
#: after which a worker thread lets the event loop have the GIL (see element_chunks)
CHUNK = 1 << 16


def deserialize_bytes(buffer: bytes | memoryview, count: int, name: str) -> np.ndarray:
    """Decode V2 binary BYTES data (each element a 4-byte little-endian length, then the bytes)
    into an object array of ``count`` ``bytes``.

    No Python code runs per element: the element boundaries come from numpy passes over the
    length prefixes (one strided comparison when every element has the same length, the
    common case, else a walk in C over windows of the buffer) and the elements are cut out by
    C-level ``map`` calls. The element count is checked against the buffer before anything
    is allocated, and the walk never looks for more than ``count`` elements."""
    view = memoryview(buffer)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    end = len(view)
    if count * 4 > end:
        # checked before allocating: a huge claimed count must not allocate a huge array
        raise InvalidInputError(
            f"input '{name}': {count} BYTES elements need at least {count * 4} bytes of data, "
            f"got {end}"
        )
    if count == 0:
        if end:
            _left_over(name, end, 0)
        return np.empty(0, dtype=np.object_)
    return _elements(view, bytes_bounds(view, count, name))


def bytes_bounds(view: memoryview, count: int, name: str) -> np.ndarray:
    """Where each of the ``count`` elements of V2 BYTES data in ``view`` starts (at its length
    prefix), and where the last one ends: ``count + 1`` int64 offsets. InvalidInputError
    naming the input when the prefixes do not describe exactly ``count`` elements."""
    end = len(view)
    (first,) = _LENGTH.unpack_from(view, 0)
    stride = first + 4
    if stride * count == end:
        # every element as long as the first? one strided comparison says
        prefixes = np.ndarray((count,), "<u4", view, 0, (stride,))
        if (prefixes == first).all():
            return np.arange(0, end + 1, stride, dtype=np.int64)
    return _walk(view, count, name)


def _walk(view: memoryview, count: int, name: str) -> np.ndarray:
    """The element boundaries of BYTES data whose elements differ in length.

    Each element's start depends on the one before, so the boundaries form a chain. Per
    window of the buffer, numpy reads the length at every byte position at once (``nxt[q]``:
    where an element starting at ``q`` would end); the chain through the window is then
    followed by ``map`` feeding on the list it extends, in C, until it leaves the window."""
    end = len(view)
    bounds = np.empty(count + 1, dtype=np.int64)
    found = 0
    pos = 0
    while found < count:
        room = end - 3 - pos  # positions from pos on that hold a whole length prefix
        if room <= 0:
            raise InvalidInputError(
                f"input '{name}': BYTES data ends after {found} of {count} elements"
            )
        window = min(_WALK_WINDOW, room)
        nxt = np.empty(window, dtype=np.int64)
        for phase in range(min(4, window)):
            nxt[phase::4] = np.frombuffer(view, "<u4", len(range(phase, window, 4)), pos + phase)
        nxt += _STEPS[:window]
        chain = [0]
        # ``map`` reads ``chain`` while ``extend`` appends to it: each next start is looked up
        # from the one before, and takewhile stops at the first start past the window
        steps = map(nxt.data.__getitem__, chain)
        chain.extend(islice(takewhile(window.__gt__, steps), count - found - 1))
        taken = bounds[found : found + len(chain)]
        taken[:] = chain
        taken += pos
        last = pos + chain[-1]
        pos += int(nxt[chain[-1]])
        found += len(chain)
        if pos > end:
            raise InvalidInputError(
                f"input '{name}': BYTES element {found - 1} declares {pos - last - 4} bytes but "
                f"only {end - last - 4} remain"
            )
    if pos != end:
        _left_over(name, end - pos, count)
    bounds[count] = pos
    return bounds


def _left_over(name: str, left: int, count: int) -> None:
    raise InvalidInputError(
        f"input '{name}': BYTES data has {left} bytes left over after {count} elements"
    )


def _elements(view: memoryview, bounds: np.ndarray) -> np.ndarray:
    """The elements between ``bounds`` (see bytes_bounds) as an object array of ``bytes``."""
    count = len(bounds) - 1
    out = np.empty(count, dtype=np.object_)
    lengths = np.diff(bounds)
    lengths -= 4
    shortest = int(lengths.min())
    longest = int(lengths.max())
    if shortest == longest:
        _fill(out, view, bounds[:-1], longest)
        return out
    if longest <= _GROUPED_LONGEST:
        sizes = np.flatnonzero(np.bincount(lengths))
        if len(sizes) <= _GROUPS and count >= _GROUP_MIN * len(sizes):
            # few distinct lengths: each group of one length is cut out as a strided void view
            # (no Python object but the elements themselves)
            for size in sizes.tolist():
                which = np.flatnonzero(lengths == size)
                group = np.empty(len(which), dtype=np.object_)
                _fill(group, np.frombuffer(view, np.uint8), bounds[which], size)
                out[which] = group
            return out
    data = view.tobytes()  # slices of bytes are bytes; slices of a memoryview are views
    cut = data.__getitem__
    for low in range(0, count, CHUNK):
        high = min(low + CHUNK, count)
        starts = (bounds[low:high] + 4).tolist()
        out[low:high] = list(map(cut, map(slice, starts, bounds[low + 1 : high + 1].tolist())))
    return out


#: the grouped cut of ``_elements``: at most this many distinct lengths, none above this,
#: and this many elements per length at least on average (a group costs a few numpy calls)
_GROUPS = 16
_GROUPED_LONGEST = 255
_GROUP_MIN = 256


def _fill(out: np.ndarray, view: Any, starts: np.ndarray, length: int) -> None:
    """``out[i]`` = the ``length`` bytes after the prefix at ``starts[i]``, for every i."""
    if length == 0:
        out.fill(b"")
        return
    data = np.frombuffer(view, np.uint8)
    if len(starts) > 1 and (np.diff(starts) == starts[1] - starts[0]).all():
        step = int(starts[1] - starts[0])
        elements = np.ndarray((len(starts),), f"V{length}", data, int(starts[0]) + 4, (step,))
    else:  # gathered: a row of ``length`` byte positions per element
        rows = (starts + 4)[:, None] + np.arange(length)
        elements = data[rows].view(f"V{length}").reshape(-1)
    # a void element is its bytes, trailing NULs included ('S' would strip them)
    for low in range(0, len(starts), CHUNK):
        out[low : low + CHUNK] = elements[low : low + CHUNK].tolist()


def element_chunks(array: np.ndarray) -> Iterator[list[Any]]:
    """A tensor's elements, row-major, as lists of at most ``CHUNK`` Python objects.

    Work over millions of elements is done a chunk at a time: a C-level call over a chunk
    takes a few milliseconds, and between chunks the thread doing it lets go of the GIL, so
    the event loop keeps answering while a worker thread codes a large tensor."""
    flat = array.reshape(-1)
    for low in range(0, flat.size, CHUNK):
        yield flat[low : low + CHUNK].tolist()


def _as_bytes(items: list[Any]) -> list[bytes]:
    """``items`` as ``bytes`` (str UTF-8 encoded), in C where they are all bytes or all str."""
    kinds = set(map(type, items))
    if kinds <= {bytes}:
        return items
    if kinds == {str}:
        return list(map(str.encode, items))
    return [item.encode() if isinstance(item, str) else bytes(item) for item in items]


def bytes_elements(array: np.ndarray) -> list[bytes]:
    """A BYTES tensor's elements, row-major, as ``bytes`` (str is UTF-8 encoded)."""
    out: list[bytes] = []
    for items in element_chunks(array):
        out.extend(_as_bytes(items))
    return out


def serialize_bytes(array: np.ndarray) -> bytes:
    """Encode an array of bytes/str elements in the V2 binary BYTES layout."""
    # per chunk, each prefix a 4-byte bytes object interleaved with the elements, joined
    # (bytes.join holds a buffer struct per part: too much for millions of parts at once)
    joined: list[bytes] = []
    for chunk in element_chunks(np.asarray(array)):
        items = _as_bytes(chunk)
        parts: list[bytes] = [b""] * (2 * len(items))
        parts[0::2] = np.fromiter(map(len, items), "<u4", len(items)).view("V4").tolist()
        parts[1::2] = items
        joined.append(b"".join(parts))
    return joined[0] if len(joined) == 1 else b"".join(joined)


def to_bytes_elements(array: np.ndarray) -> np.ndarray:
    """Normalise a BYTES tensor to an object array of ``bytes`` (str is UTF-8 encoded)."""
    if array.dtype == np.object_ and all(
        set(map(type, items)) <= {bytes} for items in element_chunks(array)
    ):
        return array
    out = np.empty(array.size, dtype=np.object_)
    low = 0
    for items in element_chunks(array):
        out[low : low + len(items)] = _as_bytes(items)
        low += len(items)
    return out.reshape(array.shape)
