"""The shared-memory registry on real POSIX shared-memory objects: registration and its
checks, tensors read and written with bounds checks, and the opt-in (one principal's regions;
tests/unit/shm/test_safety.py: objects that shrink, principals, limits)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from multiprocessing import shared_memory

import numpy as np
import pytest

from inferplex.datatypes import serialize_bytes
from inferplex.errors import (
    InvalidInputError,
    PermissionDeniedError,
    RegionNotFoundError,
    UnsupportedError,
)
from inferplex.shm.registry import SHM_DIR, Regions, SharedMemoryRegistry, require

pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="needs Linux /dev/shm")


@pytest.fixture
def block() -> Iterator[shared_memory.SharedMemory]:
    """A 256-byte POSIX shared-memory object, as a client creates it."""
    memory = shared_memory.SharedMemory(f"inferplex_test_{uuid.uuid4().hex[:12]}", True, 256)
    yield memory
    memory.close()
    memory.unlink()


@pytest.fixture
def registry() -> Iterator[Regions]:
    """The anonymous principal's regions of a registry that allows shared memory."""
    shm = SharedMemoryRegistry(enabled=True)
    yield shm.owned_by(None)
    shm.close()


def key(block: shared_memory.SharedMemory) -> str:
    return "/" + block.name.lstrip("/")


def ref(region: str, byte_size: int, offset: int = 0) -> dict[str, object]:
    return {
        "shared_memory_region": region,
        "shared_memory_byte_size": byte_size,
        "shared_memory_offset": offset,
    }


def test_register_status_unregister(registry: Regions, block) -> None:
    registry.register("r", key(block), 16, 128)
    registry.register("whole", block.name, 0, 256)  # the key with or without its slash
    assert registry.status("r") == [
        {"name": "r", "key": key(block), "offset": 16, "byte_size": 128}
    ]
    assert [s["name"] for s in registry.status()] == ["r", "whole"]
    registry.unregister("r")
    registry.unregister("never registered")  # as in Triton: nothing to do
    assert [s["name"] for s in registry.status()] == ["whole"]
    registry.unregister()
    assert registry.status() == []
    with pytest.raises(RegionNotFoundError, match="no shared memory region 'r'"):
        registry.status("r")


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (200, 100, "offset 200 \\+ byte_size 100 is past the end of .* \\(256 bytes\\)"),
        (-1, 10, "'offset' must be a non-negative integer"),
        (0, True, "'byte_size' must be a non-negative integer"),
    ],
)
def test_registration_must_fit_the_object(
    registry: Regions, block, offset: int, byte_size: int, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        registry.register("r", key(block), offset, byte_size)
    assert registry.status() == []


def test_a_name_is_registered_once(registry: Regions, block) -> None:
    registry.register("r", key(block), 0, 8)
    with pytest.raises(InvalidInputError, match="'r' is already registered"):
        registry.register("r", key(block), 0, 8)


@pytest.mark.parametrize("bad", ["/../etc/passwd", "/a/b", "/", "..", ""])
def test_keys_cannot_leave_the_shared_memory_folder(registry: Regions, bad: str) -> None:
    with pytest.raises(InvalidInputError, match="must name a POSIX shared memory object"):
        registry.register("r", bad, 0, 1)


def test_missing_objects_and_links_are_refused(registry: Regions, tmp_path, block) -> None:
    with pytest.raises(InvalidInputError, match="cannot open shared memory object"):
        registry.register("r", "/inferplex_no_such_object", 0, 1)
    target = tmp_path / "secret"
    target.write_bytes(b"x" * 64)
    link = SHM_DIR / f"inferplex_test_link_{uuid.uuid4().hex[:8]}"
    os.symlink(target, link)
    try:
        with pytest.raises(InvalidInputError, match="cannot open shared memory object"):
            registry.register("r", "/" + link.name, 0, 1)
    finally:
        link.unlink()


def test_registration_is_off_unless_enabled(block) -> None:
    off = SharedMemoryRegistry(enabled=False).owned_by(None)
    with pytest.raises(PermissionDeniedError, match="--allow-shared-memory"):
        off.register("r", key(block), 0, 8)
    assert off.status() == []
    off.unregister()  # harmless
    with pytest.raises(PermissionDeniedError, match="--allow-shared-memory"):
        off.read_input("IN", ref("r", 4), "FP32", (1,))


def test_inputs_are_read_only_copies_of_the_region(registry: Regions, block) -> None:
    data = np.arange(6, dtype=np.float32)
    block.buf[40:64] = data.tobytes()
    registry.register("r", key(block), 8, 128)
    array = registry.read_input("IN", ref("r", 24, 32), "FP32", (2, 3))
    np.testing.assert_array_equal(array, data.reshape(2, 3))
    assert not array.flags.writeable
    block.buf[40:44] = np.float32(7).tobytes()  # read, not mapped: the client's later
    assert array[0, 0] == 0  # writes do not show (nor can its truncation fault the server)


def test_bytes_inputs_are_decoded(registry: Regions, block) -> None:
    raw = serialize_bytes(np.array([b"ab", b"cde"], dtype=object))
    block.buf[: len(raw)] = raw
    registry.register("r", key(block), 0, 256)
    array = registry.read_input("S", ref("r", len(raw)), "BYTES", (1, 2))
    assert array.tolist() == [[b"ab", b"cde"]]


@pytest.mark.parametrize(
    ("parameters", "error", "message"),
    [
        (ref("r", 8, 60), InvalidInputError, "offset 60 \\+ shared_memory_byte_size 8 is past"),
        (ref("r", 12), InvalidInputError, "byte_size is 12 but shape \\[2\\] of FP32 needs 8"),
        (ref("r", -8), InvalidInputError, "shared_memory_byte_size must be a non-negative"),
        (ref("r", 8, -1), InvalidInputError, "shared_memory_offset must be a non-negative"),
        ({"shared_memory_region": "r"}, InvalidInputError, "shared_memory_byte_size is required"),
        (ref("other", 8), InvalidInputError, "no shared memory region 'other'"),
    ],
)
def test_bad_references_name_the_input(
    registry: Regions, block, parameters: dict, error: type, message: str
) -> None:
    registry.register("r", key(block), 0, 64)
    with pytest.raises(error, match=message) as info:
        registry.read_input("IN", parameters, "FP32", (2,))
    assert "input 'IN'" in info.value.message


def test_outputs_are_written_at_their_offset(registry: Regions, block) -> None:
    registry.register("r", key(block), 64, 128)
    result = np.arange(4, dtype=np.int64)  # the backend's dtype, cast to the declared INT32
    answer = registry.write_output("OUT", ref("r", 16, 8), "INT32", result)
    assert answer == {
        "shared_memory_region": "r",
        "shared_memory_byte_size": 16,
        "shared_memory_offset": 8,
    }
    written = np.frombuffer(bytes(block.buf[72:88]), dtype=np.int32)
    np.testing.assert_array_equal(written, result)
    text = np.array([b"hello"], dtype=object)
    assert registry.write_output("S", ref("r", 64), "BYTES", text)["shared_memory_byte_size"] == 9
    assert bytes(block.buf[64:73]) == serialize_bytes(text)


def test_outputs_must_fit(registry: Regions, block) -> None:
    registry.register("r", key(block), 0, 64)
    with pytest.raises(InvalidInputError, match="byte_size is 8 but the result has 16 bytes"):
        registry.write_output("OUT", ref("r", 8), "FP32", np.zeros(4, np.float32))
    with pytest.raises(InvalidInputError, match=r"output 'OUT'.*past the end"):
        registry.check_output("OUT", ref("r", 16, 56))


def test_unregistering_leaves_tensors_read_before_as_they_were(registry: Regions, block) -> None:
    block.buf[:4] = np.float32(3).tobytes()
    registry.register("r", key(block), 0, 64)
    array = registry.read_input("IN", ref("r", 4), "FP32", (1,))
    registry.unregister("r")
    assert array[0] == 3  # the tensor's own memory
    with pytest.raises(InvalidInputError, match="no shared memory region 'r'"):
        registry.read_input("IN", ref("r", 4), "FP32", (1,))


def test_codecs_without_a_registry_refuse_shared_memory() -> None:
    with pytest.raises(UnsupportedError, match="shared-memory tensors are not available"):
        require(None)


def test_an_empty_shape_too_big_for_numpy_names_the_input(registry: Regions, block) -> None:
    registry.register("r", key(block), 0, block.size)
    with pytest.raises(InvalidInputError, match=r"input 'IN': shape .* is not usable"):
        registry.read_input("IN", ref("r", 0), "FP32", (0, 6340, 11884951, 122406104))
