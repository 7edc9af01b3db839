"""One registered region, read and written through the object's file descriptor.

The object is never mapped. A mapping would let the client crash the server: an owner that
shrinks its object after registering it (``ftruncate``) turns every later access past the new
end into SIGBUS, which kills the process, and no check before the access can close the race
(the owner can truncate between the check and the access). ``pread``/``pwrite`` on the
descriptor cannot fault: a read past the end comes back short, which is an error naming the
region, and the server goes on.

A read lands straight in the buffer the tensor keeps (one copy, kernel to array). A write
goes from the result's buffer to the object (``pwrite`` never stops short on a regular file:
it extends it), so the object's size is checked first: an object found shrunk is an error; one
truncated between that check and the write is grown back to the registered size by the write,
which is harmless (the owner's own object, no larger than it registered).

The descriptor lives as long as the Region object: a request that is reading or writing one
holds it, so unregistering while a request uses the region never closes (or lets the system
reuse) a descriptor under it; the last holder to let go closes it.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from inferplex.errors import InvalidInputError

__all__ = ["BYTE_SIZE", "OFFSET", "Region"]

#: tensor parameters of the extension
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"


class Region:
    """One registered region: ``byte_size`` bytes from ``offset`` of the object ``key``,
    open as ``fd`` (read-write), which this object owns."""

    __slots__ = ("__weakref__", "byte_size", "fd", "key", "name", "offset")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.fd = fd
        weakref.finalize(self, os.close, fd)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def start(self, offset: int, byte_size: int, what: str) -> int:
        """Where ``byte_size`` bytes at ``offset`` in the region begin in the object; an
        InvalidInputError naming ``what`` when they do not lie within the region."""
        if offset + byte_size > self.byte_size:
            raise InvalidInputError(
                f"{what}: {OFFSET} {offset} + {BYTE_SIZE} {byte_size} is past the end of "
                f"shared memory region '{self.name}' ({self.byte_size} bytes)"
            )
        return self.offset + offset

    def read_into(self, target: memoryview, start: int, what: str) -> None:
        """Fill ``target`` (writable, of bytes: e.g. a uint8 array's ``data``) from ``start``
        in the object."""
        wanted = len(target)
        done = 0
        try:
            while done < wanted:  # more than one turn only past Linux's ~2 GiB per call
                got = os.preadv(self.fd, [target[done:]], start + done)
                if not got:
                    raise self._shrunk(what)
                done += got
        except OSError as exc:
            raise self._failed(what, "read from", exc) from None

    def write_from(self, data: bytes | memoryview, start: int, what: str) -> None:
        """Write ``data`` (bytes, or a memoryview of bytes) at ``start`` in the object."""
        wanted = len(data)
        try:
            if os.fstat(self.fd).st_size < start + wanted:
                raise self._shrunk(what)
            done = 0
            while done < wanted:
                done += os.pwrite(self.fd, data[done:], start + done)
        except OSError as exc:
            raise self._failed(what, "written to", exc) from None

    def _shrunk(self, what: str) -> InvalidInputError:
        try:
            now = f"{os.fstat(self.fd).st_size} bytes"
        except OSError as exc:
            now = f"an unknown size ({exc.strerror})"
        return InvalidInputError(
            f"{what}: shared memory region '{self.name}' was registered as {self.byte_size} "
            f"bytes from offset {self.offset} of '{self.key}', but that object now has {now}: "
            "it was truncated after registration; unregister the region and register it again"
        )

    def _failed(self, what: str, verb: str, exc: OSError) -> InvalidInputError:
        return InvalidInputError(
            f"{what}: shared memory region '{self.name}' could not be {verb}: {exc.strerror}"
        )
