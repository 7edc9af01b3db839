"""The system shared-memory regions clients register, and tensors read from and written to
them (the V2 system shared-memory extension, as Triton implements it).

A client creates a POSIX shared-memory object (``shm_open``, e.g. with tritonclient's
``create_shared_memory_region``), registers it under a region name with its key, an offset and
a size, and then names the region, an offset in it and a byte size in a tensor's parameters
(``shared_memory_region``, ``shared_memory_offset``, ``shared_memory_byte_size``) instead of
sending the tensor's bytes. The server opens the object once, at registration, and reads and
writes it through that descriptor, never through a mapping (region.py says why): an input is
read into the array the tensor keeps, an output is written from the result and the response
carries only its name, datatype, shape and the parameters.

A region belongs to the principal that registered it (the identity the authorization layer
gave the request: which token it presented; everyone is one anonymous principal when no
token is set). Each principal has its own names (:meth:`SharedMemoryRegistry.owned_by`): a
region of another principal cannot be used, unregistered or seen, and naming it gets exactly
the answer a name nobody registered gets.

Registration is off unless the server runs with ``--allow-shared-memory``: a registered region
lets a client make the server read and write that memory, so, like Triton's opt-in for client
shared memory, it is for hosts whose clients are trusted. Keys are checked to name an object in
``/dev/shm`` (no path separators, no symbolic links, regular files only). Linux only.

All methods run on the event loop (the frontends') or, for a large tensor, in the worker
thread that decodes or encodes its request; nothing here blocks for long on the loop: a
decode on the loop reads at most ``ON_LOOP_READ_BYTES`` and asks for a worker thread beyond.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
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
    PayloadTooLargeError,
    PermissionDeniedError,
    RegionNotFoundError,
    TooManyRegionsError,
    UnsupportedError,
)
from inferplex.shm.region import BYTE_SIZE, OFFSET, Region

__all__ = [
    "CUDA_UNSUPPORTED",
    "FLAG",
    "ON_LOOP_READ_BYTES",
    "REGION",
    "ReadOffLoop",
    "Region",
    "Regions",
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
#: tensor parameter of the extension naming the region (OFFSET, BYTE_SIZE: region.py)
REGION = "shared_memory_region"
#: the most bytes one tensor is read from a region while its request is decoded on the event
#: loop: as much as dataplane/offload.py decodes there (OFFLOAD_BYTES); a larger read
#: raises ReadOffLoop and the request is decoded in a worker thread
ON_LOOP_READ_BYTES = 16 << 10


class ReadOffLoop(Exception):
    """A tensor too large to read on the event loop: decode its request in a worker thread
    (never reaches a client)."""


class SharedMemoryRegistry:
    """The regions registered with this server, by owner (principal) and name."""

    def __init__(
        self, enabled: bool, *, max_regions: int = 128, max_read_bytes: int = 256 << 20
    ) -> None:
        """``max_regions``: the most regions one principal may hold (each holds a file
        descriptor); ``max_read_bytes``: the most bytes one input tensor may be read from a
        region (it becomes a copy in the server's memory, as a request body would be)."""
        self.enabled = enabled
        self.max_regions = max_regions
        self.max_read_bytes = max_read_bytes
        self._views: dict[object, Regions] = {}

    def owned_by(self, owner: object) -> Regions:
        """The regions of the principal ``owner`` (None: the anonymous one): a dictionary
        lookup per request; the few principals there are each get one view, kept."""
        view = self._views.get(owner)
        if view is None:
            view = self._views[owner] = Regions(self, {})
        return view

    def close(self) -> None:
        for view in self._views.values():
            view.unregister()

    def check_enabled(self) -> None:
        if not self.enabled:
            raise PermissionDeniedError(
                "system shared memory is off on this server: start it with "
                f"{FLAG} (INFERPLEX_ALLOW_SHARED_MEMORY=true) to register regions"
            )


class Regions:
    """The regions of one principal, by name: the extension's endpoints and the tensors of
    its requests. ``on_loop`` is the same regions for a decode on the event loop."""

    __slots__ = ("_most", "_regions", "_registry", "on_loop")

    def __init__(
        self, registry: SharedMemoryRegistry, regions: dict[str, Region], most: int = 0
    ) -> None:
        self._registry = registry
        self._regions = regions
        self._most = most  # 0: reads of any size; else larger reads raise ReadOffLoop
        self.on_loop: Regions = self if most else Regions(registry, regions, ON_LOOP_READ_BYTES)

    # -- the extension's endpoints --------------------------------------------------------
    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Open the shared-memory object ``key`` for ``byte_size`` bytes at ``offset``."""
        self._registry.check_enabled()
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
        most = self._registry.max_regions
        if len(self._regions) >= most:
            raise TooManyRegionsError(
                f"shared memory region '{name}': {len(self._regions)} regions are registered, "
                f"the limit of INFERPLEX_MAX_SHARED_MEMORY_REGIONS ({most}); unregister one"
            )
        fd, size = _open(name, key)
        if offset + byte_size > size:
            os.close(fd)
            raise InvalidInputError(
                f"shared memory region '{name}': offset {offset} + byte_size {byte_size} is past "
                f"the end of shared memory object '{key}' ({size} bytes)"
            )
        self._regions[name] = Region(name, key, offset, byte_size, fd)

    def unregister(self, name: str = "") -> None:
        """Forget one region (unknown names are ignored, as in Triton) or, with no name, all.
        A request still reading or writing one keeps its descriptor open until it is done."""
        if name:
            self._regions.pop(name, None)
        else:
            self._regions.clear()

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """One region's status, or every region's."""
        if name:
            self._registry.check_enabled()
            region = self._regions.get(name)
            if region is None:
                raise RegionNotFoundError(f"no shared memory region '{name}' is registered")
            return [region.status()]
        return [region.status() for region in self._regions.values()]

    # -- tensors --------------------------------------------------------------------------
    def read_input(
        self, name: str, parameters: Mapping[str, Any], datatype: str, shape: tuple[int, ...]
    ) -> np.ndarray:
        """The input ``name`` from the region its parameters name: a read-only array of its
        own for fixed-size datatypes, decoded elements for BYTES."""
        what = f"input '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        start = region.start(offset, byte_size, what)
        count = prod(shape)
        dtype = V2_TO_NUMPY[datatype]
        if datatype != "BYTES" and byte_size != count * dtype.itemsize:
            raise InvalidInputError(
                f"{what}: {BYTE_SIZE} is {byte_size} but shape {list(shape)} of {datatype} "
                f"needs {count * dtype.itemsize} bytes"
            )
        if byte_size > self._registry.max_read_bytes:
            raise PayloadTooLargeError(
                f"{what}: {BYTE_SIZE} {byte_size} is above the limit of "
                f"{self._registry.max_read_bytes} bytes (INFERPLEX_MAX_REQUEST_BYTES): a tensor "
                "in shared memory is copied into the server as a request body would be"
            )
        if self._most and byte_size > self._most:
            raise ReadOffLoop
        if datatype == "BYTES":
            raw = np.empty(byte_size, np.uint8)
            region.read_into(raw.data, start, what)
            elements = deserialize_bytes(raw.data, count, name)
            return reshape_input(elements, shape, name)
        if not count:
            return reshape_input(np.empty(0, dtype), shape, name)
        array = np.empty(count, dtype)
        region.read_into(array.view(np.uint8).data, start, what)
        # read-only, as a tensor viewing a request body is: a model never writes its inputs
        array.flags.writeable = False
        return array.reshape(shape)

    def check_output(self, name: str, parameters: Mapping[str, Any]) -> None:
        """Check an output's shared-memory parameters when the request arrives, before any
        work is done for it."""
        what = f"output '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        region.start(offset, byte_size, what)

    def write_output(
        self, name: str, parameters: Mapping[str, Any], datatype: str, data: np.ndarray
    ) -> dict[str, Any]:
        """Write an output into the region its parameters name; returns the parameters its
        response entry carries instead of data."""
        what = f"output '{name}'"
        region, offset, byte_size = self._reference(parameters, what)
        start = region.start(offset, byte_size, what)
        raw: bytes | memoryview
        if datatype == "BYTES":
            raw = serialize_bytes(np.asarray(data))
        else:
            # the wire needs the declared dtype: the one copy is the cast, when there is one
            contiguous = np.ascontiguousarray(data, dtype=V2_TO_NUMPY[datatype])
            raw = contiguous.reshape(-1).view(np.uint8).data
        nbytes = len(raw)
        if nbytes > byte_size:
            raise InvalidInputError(
                f"{what}: {BYTE_SIZE} is {byte_size} but the result has {nbytes} bytes; give a "
                "region (or part of one) at least that large"
            )
        if nbytes:
            region.write_from(raw, start, what)
        answer: dict[str, Any] = {REGION: region.name, BYTE_SIZE: nbytes}
        if offset:
            answer[OFFSET] = offset
        return answer

    # -- helpers --------------------------------------------------------------------------
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
            self._registry.check_enabled()
            raise InvalidInputError(f"{what}: no shared memory region '{name}' is registered")
        return region, offset, byte_size


def cuda_status(name: str = "") -> list[dict[str, Any]]:
    """CUDA shared memory: no region is ever registered (registering answers
    CUDA_UNSUPPORTED), so the status of all is empty and of one, not found. Listing and
    unregistering all succeed, as clients such as perf_analyzer do both before they start."""
    if name:
        raise RegionNotFoundError(f"no CUDA shared memory region '{name}': {CUDA_UNSUPPORTED}")
    return []


def require(regions: Regions | None) -> Regions:
    """The regions a codec was given; UnsupportedError where it was given none."""
    if regions is None:
        raise UnsupportedError(
            "shared-memory tensors are not available here; send the data in the request"
        )
    return regions


def _open(name: str, key: str) -> tuple[int, int]:
    """Open the shared-memory object ``key`` (``/name`` or ``name``) read-write; its
    descriptor and size."""
    object_name = key.lstrip("/")
    if not object_name or "/" in object_name or "\0" in object_name or object_name in (".", ".."):
        raise InvalidInputError(
            f"shared memory region '{name}': key {key!r} must name a POSIX shared memory "
            "object, e.g. '/my_region' (no '/' after the first character)"
        )
    path = SHM_DIR / object_name
    try:
        # no symbolic links: /dev/shm is writable by everyone, and a link there must not
        # lead the server to open some other file; O_NONBLOCK: nothing there may make the
        # open wait (a FIFO), and it changes nothing for a regular file
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise InvalidInputError(
            f"shared memory region '{name}': cannot open shared memory object '{key}': "
            f"{exc.strerror}"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        os.close(fd)
        raise InvalidInputError(
            f"shared memory region '{name}': '{key}' is not a shared memory object with data"
        )
    return fd, info.st_size
