"""The system shared-memory regions clients register, and tensors read from and written to
them (the V2 system shared-memory extension, as Triton implements it).

A client creates a POSIX shared-memory object (``shm_open``, e.g. with tritonclient's
``create_shared_memory_region``), registers it under a region name with its key, an offset and
a size, and then names the region, an offset in it and a byte size in a tensor's parameters
(``shared_memory_region``, ``shared_memory_offset``, ``shared_memory_byte_size``) instead of
sending the tensor's bytes. The server maps the object once, at registration: an input becomes
a read-only numpy view of the mapping (no copy), an output is copied into it and the response
carries only its name, datatype, shape and the parameters.

Registration is off unless the server runs with ``--allow-shared-memory``: a registered region
lets a client make the server read and write that memory, so, like Triton's opt-in for client
shared memory, it is for hosts whose clients are trusted. Keys are checked to name an object in
``/dev/shm`` (no path separators, no symbolic links, regular files only). Linux only.

All methods run on the event loop (the frontends'); nothing here blocks for long.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from inferplex.datatypes import (
    V2_TO_NUMPY,
    deserialize_bytes,
    reshape_input,
    serialize_bytes,
)
from inferplex.errors import (
    InvalidInputError,
    PermissionDeniedError,
    RegionNotFoundError,
    UnsupportedError,
)

__all__ = [
    "CUDA_UNSUPPORTED",
    "FLAG",
    "REGION",
    "Region",
    "SharedMemoryRegistry",
    "cuda_status",
    "require",
]

#: where Linux keeps POSIX shared-memory objects
SHM_DIR = Path("/dev/shm")
#: the server flag that turns registration on
FLAG = "--allow-shared-memory"
#: the answer to a CUDA shared-memory registration
CUDA_UNSUPPORTED = (
    "CUDA shared memory is not supported by this server (it would need a GPU and CUDA IPC "
    "handles, which inferplex does not implement); use system shared memory instead"
)
#: tensor parameters of the extension
REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"


@dataclass(eq=False)
class Region:
    """One registered region: ``byte_size`` bytes from ``offset`` of the object ``key``."""

    name: str
    key: str
    offset: int
    byte_size: int
    buffer: mmap.mmap  # the whole object, mapped shared and writable

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def start(self, offset: int, byte_size: int, what: str) -> int:
        """Where ``byte_size`` bytes at ``offset`` in the region begin in the mapping; an
        InvalidInputError naming ``what`` when they do not lie within the region."""
        if offset + byte_size > self.byte_size:
            raise InvalidInputError(
                f"{what}: {OFFSET} {offset} + {BYTE_SIZE} {byte_size} is past the end of "
                f"shared memory region '{self.name}' ({self.byte_size} bytes)"
            )
        return self.offset + offset


class SharedMemoryRegistry:
    """The regions registered with this server, by name."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._regions: dict[str, Region] = {}

    # -- the extension's endpoints --------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the shared-memory object ``key``."""
        self._check_enabled()
        if not name:
            raise InvalidInputError("a shared memory region needs a non-empty name")
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if type(value) is not int or value < 0:
                raise InvalidInputError(
                    f"shared memory region '{name}': '{field}' must be a non-negative integer, "
                    f"got {value!r}"
                )
        if name in self._regions:
            raise InvalidInputError(
                f"shared memory region '{name}' is already registered; unregister it first"
            )
        buffer = _map(name, key)
        size = len(buffer)
        if offset + byte_size > size:
            buffer.close()
            raise InvalidInputError(
                f"shared memory region '{name}': offset {offset} + byte_size {byte_size} is past "
                f"the end of shared memory object '{key}' ({size} bytes)"
            )
        self._regions[name] = Region(name, key, offset, byte_size, buffer)

    def unregister(self, name: str = "") -> None:
        """Forget one region (unknown names are ignored, as in Triton) or, with no name, all.
        Tensors still in use keep their mapping alive until they are done."""
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                _close(region.buffer)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """One region's status, or every region's."""
        if name:
            return [self._region(name, "").status()]
        return [region.status() for region in self._regions.values()]

    def close(self) -> None:
        self.unregister()

    # -- tensors --------------------------------------------------------------------------
    def read_input(
        self, name: str, parameters: Mapping[str, Any], datatype: str, shape: tuple[int, ...]
    ) -> np.ndarray:
        """The input ``name`` from the region its parameters name: a read-only view of the
        region for fixed-size datatypes, decoded elements for BYTES."""
        what = f"input '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        start = region.start(offset, byte_size, what)
        count = prod(shape)
        if datatype == "BYTES":
            with memoryview(region.buffer) as view:
                elements = deserialize_bytes(view[start : start + byte_size], count, name)
                return reshape_input(elements, shape, name)
        dtype = V2_TO_NUMPY[datatype]
        expected = count * dtype.itemsize
        if byte_size != expected:
            raise InvalidInputError(
                f"{what}: {BYTE_SIZE} is {byte_size} but shape {list(shape)} of {datatype} "
                f"needs {expected} bytes"
            )
        if not count:
            return reshape_input(np.empty(0, dtype), shape, name)
        # frombuffer holds an export of the mapping, so unregistering cannot unmap it while
        # the tensor is in use (an ndarray made with buffer= would not)
        array = np.frombuffer(region.buffer, dtype, count, start).reshape(shape)
        # the model must not write into the client's memory, as it cannot into a request body
        array.flags.writeable = False
        return array

    def check_output(self, name: str, parameters: Mapping[str, Any]) -> None:
        """Check an output's shared-memory parameters when the request arrives, before any
        work is done for it."""
        what = f"output '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        region.start(offset, byte_size, what)

    def write_output(
        self, name: str, parameters: Mapping[str, Any], datatype: str, data: np.ndarray
    ) -> dict[str, Any]:
        """Copy an output into the region its parameters name; returns the parameters its
        response entry carries instead of data."""
        what = f"output '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        start = region.start(offset, byte_size, what)
        raw: bytes | None = None
        if datatype == "BYTES":
            raw = serialize_bytes(np.asarray(data))
            nbytes = len(raw)
        else:
            nbytes = data.size * V2_TO_NUMPY[datatype].itemsize
        if nbytes > byte_size:
            raise InvalidInputError(
                f"{what}: {BYTE_SIZE} is {byte_size} but the result has {nbytes} bytes; give a "
                "region (or part of one) at least that large"
            )
        if raw is not None:
            region.buffer[start : start + nbytes] = raw
        elif nbytes:
            dtype = V2_TO_NUMPY[datatype]
            target = np.frombuffer(region.buffer, dtype, data.size, start).reshape(data.shape)
            np.copyto(target, data, casting="unsafe")  # the wire needs the declared dtype
            del target  # let the mapping go when the region is unregistered
        answer: dict[str, Any] = {REGION: region.name, BYTE_SIZE: nbytes}
        if offset:
            answer[OFFSET] = offset
        return answer

    # -- helpers --------------------------------------------------------------------------
    def _check_enabled(self) -> None:
        if not self.enabled:
            raise PermissionDeniedError(
                "system shared memory is off on this server: start it with "
                f"{FLAG} (INFERPLEX_ALLOW_SHARED_MEMORY=true) to register regions"
            )

    def _region(self, name: str, what: str) -> Region:
        self._check_enabled()
        region = self._regions.get(name)
        if region is None:
            where = f"{what}: " if what else ""
            raise RegionNotFoundError(f"{where}no shared memory region '{name}' is registered")
        return region

    def _reference(self, parameters: Mapping[str, Any], what: str) -> tuple[Region, int, int]:
        """The region, offset and byte size a tensor's parameters name."""
        name = parameters.get(REGION)
        if type(name) is not str or not name:
            raise InvalidInputError(f"{what}: parameters.{REGION} must be a region name")
        byte_size = parameters.get(BYTE_SIZE)
        if byte_size is None:
            raise InvalidInputError(f"{what}: parameters.{BYTE_SIZE} is required with {REGION}")
        offset = parameters.get(OFFSET, 0)
        for field, value in ((BYTE_SIZE, byte_size), (OFFSET, offset)):
            if type(value) is not int or value < 0:
                raise InvalidInputError(
                    f"{what}: parameters.{field} must be a non-negative integer, got {value!r}"
                )
        region = self._regions.get(name)
        if region is None:
            self._check_enabled()
            raise InvalidInputError(f"{what}: no shared memory region '{name}' is registered")
        return region, offset, byte_size


def cuda_status(name: str = "") -> list[dict[str, Any]]:
    """CUDA shared memory: no region is ever registered (registering answers
    CUDA_UNSUPPORTED), so the status of all is empty and of one, not found. Listing and
    unregistering all succeed, as clients such as perf_analyzer do both before they start."""
    if name:
        raise RegionNotFoundError(f"no CUDA shared memory region '{name}': {CUDA_UNSUPPORTED}")
    return []


def require(registry: SharedMemoryRegistry | None) -> SharedMemoryRegistry:
    """The registry a codec was given; UnsupportedError where it was given none."""
    if registry is None:
        raise UnsupportedError(
            "shared-memory tensors are not available here; send the data in the request"
        )
    return registry


def _map(name: str, key: str) -> mmap.mmap:
    """Map the whole shared-memory object ``key`` (``/name`` or ``name``) read-write."""
    object_name = key.lstrip("/")
    if not object_name or "/" in object_name or "\0" in object_name or object_name in (".", ".."):
        raise InvalidInputError(
            f"shared memory region '{name}': key {key!r} must name a POSIX shared memory "
            "object, e.g. '/my_region' (no '/' after the first character)"
        )
    path = SHM_DIR / object_name
    try:
        # no symbolic links: /dev/shm is writable by everyone, and a link there must not
        # lead the server to map some other file
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidInputError(
            f"shared memory region '{name}': cannot open shared memory object '{key}': "
            f"{exc.strerror}"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            raise InvalidInputError(
                f"shared memory region '{name}': '{key}' is not a shared memory object with data"
            )
        return mmap.mmap(fd, info.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def _close(buffer: mmap.mmap) -> None:
    # tensors that still view the mapping keep it: it goes with the last of them
    with contextlib.suppress(BufferError):
        buffer.close()
