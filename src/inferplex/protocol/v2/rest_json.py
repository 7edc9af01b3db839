"""JSON tensor data of the V2 REST protocol <-> numpy, with the checks JSON needs: nesting,
element counts, the kind of every value and the range of its datatype.

Every problem is an :class:`InvalidInputError` whose message names the tensor.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import chain
from math import prod
from typing import Any, ClassVar

import numpy as np
import orjson

from inferplex.dataplane.checks import element_count_error, out_of_range_error
from inferplex.datatypes import CHUNK, V2_TO_NUMPY, element_chunks, reshape_input
from inferplex.errors import InvalidInputError

#: Closed ranges a JSON number must fall into for each datatype that can overflow on the cast.
_RANGES: dict[str, tuple[int | float, int | float]] = {
    name: (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for name, dtype in V2_TO_NUMPY.items()
    if dtype.kind in "iu"
}
_RANGES["FP16"] = (-float(np.finfo(np.float16).max), float(np.finfo(np.float16).max))
_RANGES["FP32"] = (-float(np.finfo(np.float32).max), float(np.finfo(np.float32).max))

#: Which numpy kinds of the array built from JSON numbers each datatype accepts.
_ACCEPTED_KINDS: dict[str, tuple[str, str]] = {
    name: ("iu", "integers") if dtype.kind in "iu" else ("iuf", "numbers")
    for name, dtype in V2_TO_NUMPY.items()
    if dtype.kind in "iuf"
}
_ACCEPTED_KINDS["BOOL"] = ("b", "true/false values")

_KIND_NAMES = {
    "b": "booleans",
    "i": "integers",
    "u": "integers",
    "f": "floating-point numbers",
    "U": "strings",
    "O": "mixed or non-numeric values",
}


def array_from_json(
    data: Any, datatype: str, dtype: np.dtype, shape: tuple[int, ...], count: int, name: str
) -> np.ndarray:
    """Convert JSON ``data`` (flat or nested, row-major) to an array of ``shape``, which has
    ``count`` elements.

    The caller gives up ``data``: a flat list of strings is emptied as it is converted."""
    return reshape_input(_json_array(data, datatype, dtype, name, shape), shape, name)


def json_values(
    data: Any, datatype: str, dtype: np.dtype, name: str, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """The values of JSON ``data`` (flat or nested, row-major) as a flat array of ``dtype``;
    with ``shape``, as many as it holds (counted before anything is converted), else any
    number. The caller gives up ``data``, as for :func:`array_from_json`."""
    return _json_array(data, datatype, dtype, name, shape).reshape(-1)


def _json_array(
    data: Any, datatype: str, dtype: np.dtype, name: str, shape: tuple[int, ...] | None
) -> np.ndarray:
    """:func:`json_values` before it is flattened (nested data gives a nested array)."""
    if not isinstance(data, list):
        raise InvalidInputError(
            f"input '{name}': 'data' must be a list (flat or nested), got {json_type(data)}"
        )
    if datatype == "BYTES":
        return _bytes_from_json(data, shape, name)
    try:
        raw = np.array(data)
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise InvalidInputError(
            f"input '{name}': 'data' is not a rectangular nested list of numbers"
        ) from None
    if shape is not None and raw.size != prod(shape):
        raise element_count_error(name, "'data'", raw.size, shape)
    if raw.size == 0:
        return np.empty(0, dtype=dtype)
    kinds = _ACCEPTED_KINDS[datatype][0]
    if kinds == "iu" and raw.dtype.kind in "fO":
        # numpy turns integers beyond int64 (large UINT64 values) into float64 or objects
        raw = _exact_integers(data, datatype, name)
    elif raw.dtype.kind not in kinds:
        raise _wrong_kind(name, datatype, raw.dtype.kind)
    if raw.size > CHUNK:  # the values are in ``raw``: free their Python objects before converting
        release(data)
    _check_range(raw, datatype, name)
    return raw.astype(dtype, copy=False)


def _check_range(raw: np.ndarray, datatype: str, name: str) -> None:
    """InvalidInputError when a finite value of ``raw`` falls outside the datatype's range."""
    limits = _RANGES.get(datatype)
    if limits is not None and (raw.min() < limits[0] or raw.max() > limits[1]):
        # Infinity (a JSON literal, as Triton reads it) is a value of every float type;
        # only finite numbers that would overflow are refused
        finite = raw[np.isfinite(raw)] if raw.dtype.kind == "f" else raw
        if finite.size and (finite.min() < limits[0] or finite.max() > limits[1]):
            raise _out_of_range(name, datatype)


def _exact_integers(data: list[Any], datatype: str, name: str) -> np.ndarray:
    """The slow path for integer data numpy could not hold as int64 or uint64."""
    try:
        values = np.array(data, dtype=np.object_).reshape(-1).tolist()
    except (ValueError, TypeError, RecursionError):
        raise InvalidInputError(
            f"input '{name}': 'data' is not a rectangular nested list of numbers"
        ) from None
    for value in values:
        if type(value) is not int:
            raise _wrong_kind(name, datatype, "f" if isinstance(value, float) else "O")
    low, high = _RANGES[datatype]
    if min(values) < low or max(values) > high:
        raise _out_of_range(name, datatype)
    return np.array(values, dtype=V2_TO_NUMPY[datatype])


def _wrong_kind(name: str, datatype: str, kind: str) -> InvalidInputError:
    got = _KIND_NAMES.get(kind, "values of another type")
    return InvalidInputError(
        f"input '{name}': 'data' must hold {_ACCEPTED_KINDS[datatype][1]} for datatype "
        f"{datatype}, got {got} ({_triton_kind(datatype)})"
    )


def _triton_kind(datatype: str) -> str:
    """Triton's words for a JSON value of the wrong kind (its clients and tests look for
    them)."""
    if datatype == "BOOL":
        return "attempt to access JSON non-boolean as boolean"
    if datatype.startswith("INT"):
        return "attempt to access JSON non-signed-integer as signed-integer"
    if datatype.startswith("UINT"):
        return "attempt to access JSON non-unsigned-integer as unsigned-integer"
    return "attempt to access JSON non-number as double"


def _out_of_range(name: str, datatype: str) -> InvalidInputError:
    low, high = _RANGES[datatype]
    return out_of_range_error(name, "'data'", datatype, low, high)


def _bytes_from_json(data: list[Any], shape: tuple[int, ...] | None, name: str) -> np.ndarray:
    """Flatten nested JSON strings row-major into a flat object array of UTF-8 ``bytes``, as
    many as ``shape`` holds when it is given."""
    flat = _flat_strings(data, name)
    del data
    count = len(flat)
    if shape is not None and count != prod(shape):
        raise element_count_error(name, "'data'", count, shape)
    array = np.empty(count, dtype=np.object_)
    # encoded in C a chunk at a time, from the end, each chunk's strings freed once encoded:
    # the strings and their bytes never all exist at once
    try:
        for low in reversed(range(0, count, CHUNK)):
            array[low : low + CHUNK] = list(map(str.encode, flat[low:]))
            del flat[low:]
    except UnicodeEncodeError:  # a lone surrogate (\ud800), which Python's json lets through
        raise InvalidInputError(
            f"input '{name}': a string holds a lone UTF-16 surrogate escape: not text"
        ) from None
    return array


def _flat_strings(data: list[Any], name: str) -> list[str]:
    """The strings of nested JSON ``data``, row-major, in a list the caller may empty
    (``data`` itself when it is flat, emptied otherwise).

    A level of lists is flattened in C at a time; a level that mixes lists and strings (legal:
    elements are counted, not the nesting) takes the walk of ``_mixed_strings``."""
    flat = data
    while True:
        kinds = _kinds(flat)
        if kinds <= {str}:
            return flat
        if kinds == {list}:
            rows = flat
            flat = []
            for low in range(0, len(rows), CHUNK):
                flat.extend(chain.from_iterable(rows[low : low + CHUNK]))
            release(rows)  # given up (``data`` too): its values are in ``flat`` now
        elif kinds == {str, list}:
            return _mixed_strings(flat, name)
        else:
            odd = next(item for item in flat if type(item) not in (str, list))
            raise _not_a_string(name, odd)


def release(values: list[Any]) -> None:
    """Empty a (nested) list of JSON values about ``CHUNK`` values at a time: freeing millions
    of Python objects is one C call that holds the GIL for all of it (0.13 s for 6 M small
    lists). Rows are sized by the first one; a row of more than ``CHUNK`` values is emptied
    on its own first."""
    stack = [values]
    while stack:
        items = stack[-1]
        if not items:
            stack.pop()
            continue
        size = 1  # values in a row, the first row's
        row = items[0]
        while type(row) is list and row:
            size *= len(row)
            row = row[0]
        if size > CHUNK:
            stack.append(items.pop())
            continue
        step = max(1, CHUNK // size)
        for low in reversed(range(0, len(items), step)):
            del items[low:]


def _kinds(items: list[Any]) -> set[type]:
    """The types of ``items``, a chunk per C-level call (see element_chunks)."""
    kinds: set[type] = set()
    for low in range(0, len(items), CHUNK):
        kinds.update(map(type, items[low : low + CHUNK]))
    return kinds


def _mixed_strings(data: list[Any], name: str) -> list[str]:
    flat: list[str] = []
    # iterative walk: orjson allows nesting deeper than Python's recursion limit
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            if not isinstance(item, str):
                raise _not_a_string(name, item)
            flat.append(item)
        else:
            stack.pop()
    return flat


def _not_a_string(name: str, item: Any) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': BYTES 'data' must hold strings, got {json_type(item)}; "
        "send raw bytes as binary data (attempt to access JSON non-string as string)"
    )


def parameters_object(raw: Any, owner: str, name: str) -> dict[str, Any]:
    """A 'parameters' object; ``owner`` and ``name`` only word the error."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        where = f"{owner} '{name}': " if name else f"{owner} "
        raise InvalidInputError(f"{where}'parameters' must be a JSON object, got {json_type(raw)}")
    for value in raw.values():
        if type(value) is dict or type(value) is list:
            _check_depth(value, owner, name)
    return raw


#: how deeply a parameter's value may nest lists and objects. V2 parameters are scalars;
#: a deeper value would make the copies of a request (pickled for a Python handler's worker,
#: written as JSON) recurse past Python's limit: a 500 where the client is at fault
_PARAMETER_DEPTH = 32


def _check_depth(value: Any, owner: str, name: str) -> None:
    """InvalidInputError when ``value`` nests more than _PARAMETER_DEPTH levels."""
    level = [value]
    for _ in range(_PARAMETER_DEPTH):
        level = [
            item
            for container in level
            for item in (container.values() if type(container) is dict else container)
            if type(item) is dict or type(item) is list
        ]
        if not level:
            return
    where = f"{owner} '{name}': " if name else f"{owner} "
    raise InvalidInputError(
        f"{where}'parameters' has a value nested more than {_PARAMETER_DEPTH} levels deep "
        "(lists or objects)"
    )


def json_type(value: Any) -> str:
    """What a JSON value is, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def strings_to_json(name: str, array: np.ndarray) -> list[str]:
    """A BYTES output's elements as JSON strings (UTF-8 text only)."""
    values: list[str] = []
    for items in element_chunks(array):
        values.extend(_texts(name, items))
    return values


def _texts(name: str, items: list[Any]) -> list[str]:
    kinds = set(map(type, items))
    if kinds <= {str}:
        return items
    if kinds == {bytes}:
        try:
            return list(map(bytes.decode, items))  # in C, per element
        except UnicodeDecodeError:
            raise _not_text(name) from None
    values: list[str] = []
    for item in items:
        if isinstance(item, bytes):
            try:
                values.append(item.decode())
            except UnicodeDecodeError:
                raise _not_text(name) from None
        else:
            values.append(str(item))
    return values


def _not_text(name: str) -> InvalidInputError:
    return InvalidInputError(
        f"output '{name}' holds bytes that are not valid UTF-8 and cannot be "
        "sent as JSON; request it with parameters.binary_data = true"
    )


class JsonPieces(list[bytes]):
    """A large output's JSON array as pieces of text, each written by one short call.

    One JSON text of a large output, made by joining its chunks with ``+`` or handed to
    orjson as a Fragment, is copied whole by calls that hold the GIL throughout (0.1-0.2 s
    each for 20 M numbers): whatever thread encodes it, the event loop waits that long. As
    pieces, the response is joined once by ``bytes.join``, which lets go of the GIL while it
    copies (it does for ``bytes`` pieces only, not for memoryviews, hence the slices)."""

    #: stands for the pieces in the response's header (orjson escapes a NUL in any string)
    PLACEHOLDER: ClassVar[orjson.Fragment] = orjson.Fragment(b"\x00")


def json_pieces(arrays: Iterable[bytes]) -> JsonPieces:
    """One JSON array of the elements of non-empty JSON ``arrays``, in pieces."""
    pieces = JsonPieces([b"["])
    for text in arrays:
        if len(pieces) > 1:
            pieces.append(b",")
        pieces.append(text[1:-1])  # a copy, of one chunk: short
    pieces.append(b"]")
    return pieces


def spliced(header: bytes, large: list[JsonPieces]) -> bytes:
    """``header`` (written with ``JsonPieces.PLACEHOLDER`` for each of ``large``, in order)
    with the pieces in their places, joined by one call that lets go of the GIL."""
    parts = header.split(b"\x00")
    out = [parts[0]]
    for pieces, tail in zip(large, parts[1:], strict=True):
        out.extend(pieces)
        out.append(tail)
    return b"".join(out)


#: bodies with this much JSON or more are decoded with the cyclic garbage collector paused
GC_PAUSE_BYTES = 1 << 20
_gc_lock = threading.Lock()
_gc_pauses = 0  # parses under way that paused it
_gc_resume = False  # whether it was enabled before the first of them


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large body is decoded. Every few hundred
    lists orjson creates start a collection over the young objects, and every so often over
    all of them: a body of millions of small nested lists parsed 4x slower with it on
    (1.9 s against 0.45 s for 6 M rows of two strings), holding the GIL all along; and the
    first collection after the parse would walk them all once more. The decoders free what
    they parsed before the pause ends. Decodes in several threads share one pause; the
    collector resumes after the last, as it was."""
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()
