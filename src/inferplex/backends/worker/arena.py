"""The shared-memory arena that carries tensors between the server and a handler's worker
process.

Each worker has one arena: an anonymous shared-memory file (``memfd``) that the server creates
and the worker inherits as a file descriptor, so nothing is left behind in ``/dev/shm`` when
either side dies. Array bytes are written into it once; only small headers (name, dtype,
shape, offset, size) travel over the pipe. The two sides take turns strictly (one writes, the
other reads, then the roles swap), so the arena needs no lock. Whoever must write more than
the arena holds grows the file; the reader remaps when a header points past its mapping.

BYTES tensors are stored in the V2 binary layout (each element a 4-byte little-endian length,
then its bytes).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from inferplex.datatypes import deserialize_bytes, serialize_bytes

#: header of one tensor in the arena: (name, numpy dtype string or "BYTES", shape, offset, size)
Header = tuple[str, str, tuple[int, ...], int, int]

BYTES = "BYTES"
#: tensors start on cache-line boundaries (and numpy's alignment needs are met)
ALIGNMENT = 64
DEFAULT_SIZE = 1 << 20


def _aligned(offset: int) -> int:
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


class Arena:
    """A growable shared-memory buffer over a file descriptor both processes hold."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, max(os.fstat(fd).st_size, 1))

    @classmethod
    def create(cls, size: int = DEFAULT_SIZE) -> Arena:
        """A new arena of ``size`` bytes (Linux: ``memfd_create``)."""
        fd = os.memfd_create("inferplex-arena")
        os.ftruncate(fd, max(size, ALIGNMENT))
        return cls(fd)

    @property
    def size(self) -> int:
        return len(self._map)

    def close(self) -> None:
        """Close the descriptor. The mapping goes with this object and any arrays still
        viewing it; the shared memory is freed when neither process holds it any more."""
        os.close(self.fd)

    def _cover(self, end: int, grow: bool) -> None:
        """Make the mapping reach ``end``: remap to the file's size, growing the file first
        when this side is the writer."""
        if end <= len(self._map):
            return
        size = os.fstat(self.fd).st_size
        if size < end:
            if not grow:
                raise ValueError(f"arena header points to byte {end}, past its size {size}")
            size = max(end, 2 * size)
            os.ftruncate(self.fd, size)
        # Views on the old mapping keep it alive; it is unmapped when they are gone.
        self._map = mmap.mmap(self.fd, size)

    def write(self, tensors: Mapping[str, Any], start: int = 0) -> tuple[list[Header], int]:
        """Copy ``tensors`` (arrays; BYTES as object/str/bytes arrays) into the arena from
        ``start``; returns their headers and the offset after the last one."""
        staged: list[tuple[str, str, tuple[int, ...], np.ndarray | bytes]] = []
        for name, value in tensors.items():
            array = np.asarray(value)
            if array.dtype.kind in ("O", "S", "U"):
                staged.append((name, BYTES, array.shape, serialize_bytes(array)))
            else:
                staged.append((name, array.dtype.str, array.shape, array))
        headers: list[Header] = []
        offset = _aligned(start)
        for name, kind, shape, data in staged:
            size = len(data) if isinstance(data, bytes) else data.nbytes
            headers.append((name, kind, shape, offset, size))
            offset = _aligned(offset + size)
        self._cover(offset, grow=True)
        buffer = self._map
        for (_, _, shape, at, size), (*_, data) in zip(headers, staged, strict=True):
            if isinstance(data, bytes):
                buffer[at : at + size] = data
            elif size:
                np.copyto(np.ndarray(shape, data.dtype, buffer, at), data, casting="no")
        return headers, offset

    def read(self, headers: list[Header], copy: bool) -> dict[str, np.ndarray]:
        """The tensors the headers describe: views into the arena (valid until the other side
        writes again) or, with ``copy``, arrays of their own. BYTES are always decoded."""
        if headers:
            self._cover(max(h[3] + h[4] for h in headers), grow=False)
        buffer = self._map
        out: dict[str, np.ndarray] = {}
        for name, kind, shape, at, size in headers:
            if kind == BYTES:
                count = int(np.prod(shape, dtype=np.int64))
                raw = memoryview(buffer)[at : at + size]
                out[name] = deserialize_bytes(raw, count, name).reshape(shape)
                continue
            array = np.ndarray(shape, np.dtype(kind), buffer, at)
            out[name] = array.copy() if copy else array
        return out

    @staticmethod
    def end(headers: list[Header], start: int = 0) -> int:
        """The first free offset after the tensors ``headers`` describe (or ``start``)."""
        return _aligned(max([start, *(h[3] + h[4] for h in headers)]))
