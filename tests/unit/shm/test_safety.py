"""What a client cannot do to the server through a shared-memory region: crash it with an
object that shrinks after registration (reads and writes go through the descriptor: a short
object is an error naming the region), use, see or unregister another principal's regions
(the answer is the one for a name nobody registered), read a large tensor on the event loop,
hold more regions or read more bytes per tensor than its limits."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from inferplex.errors import (
    InferplexError,
    InvalidInputError,
    PayloadTooLargeError,
    RegionNotFoundError,
    TooManyRegionsError,
)
from inferplex.shm.registry import (
    ON_LOOP_READ_BYTES,
    SHM_DIR,
    ReadOffLoop,
    SharedMemoryRegistry,
)

pytestmark = pytest.mark.skipif(not SHM_DIR.is_dir(), reason="needs Linux /dev/shm")

SIZE = 64 << 10


@pytest.fixture
def obj() -> Iterator[Path]:
    """A POSIX shared-memory object of SIZE bytes (0, 1, 2, ... mod 256), never mapped by
    the test: truncating a mapped object would fault the test process itself."""
    path = SHM_DIR / f"inferplex_test_{uuid.uuid4().hex[:12]}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.pwrite(fd, bytes(range(256)) * (SIZE // 256), 0)
    finally:
        os.close(fd)
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    shm = SharedMemoryRegistry(enabled=True)
    yield shm
    shm.close()


def ref(region: str, byte_size: int, offset: int = 0) -> dict[str, object]:
    return {
        "shared_memory_region": region,
        "shared_memory_byte_size": byte_size,
        "shared_memory_offset": offset,
    }


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_object_truncated_after_registration_is_an_error_not_a_signal(
    registry: SharedMemoryRegistry, obj: Path
) -> None:
    regions = registry.owned_by(None)
    regions.register("r", "/" + obj.name, 1024, 4096)
    os.truncate(obj, 0)  # the owner shrinks it: a mapping would now fault on access
    for read in (
        lambda: regions.read_input("IN", ref("r", 4096), "UINT8", (4096,)),
        lambda: regions.read_input("S", ref("r", 16), "BYTES", (1,)),
    ):
        with pytest.raises(InvalidInputError) as info:
            read()
        message = info.value.message
        assert "shared memory region 'r' was registered as 4096 bytes from offset 1024" in message
        assert "now has 0 bytes" in message and message.startswith("input '")
    with pytest.raises(InvalidInputError, match=r"output 'OUT'.*'r'.*now has 0 bytes"):
        regions.write_output("OUT", ref("r", 8), "FP32", np.ones(2, np.float32))
    assert os.stat(obj).st_size == 0  # the failed write did not grow it back


def test_a_partly_shrunk_object_is_caught_too(registry: SharedMemoryRegistry, obj: Path) -> None:
    regions = registry.owned_by(None)
    regions.register("r", "/" + obj.name, 0, SIZE)
    os.truncate(obj, 100)
    head = regions.read_input("IN", ref("r", 100), "UINT8", (100,))  # still there
    np.testing.assert_array_equal(head, np.arange(100, dtype=np.uint8))
    with pytest.raises(InvalidInputError, match="now has 100 bytes"):
        regions.read_input("IN", ref("r", 8, 96), "UINT8", (8,))


def test_reads_and_writes_go_through_the_descriptor(
    registry: SharedMemoryRegistry, obj: Path
) -> None:
    regions = registry.owned_by(None)
    regions.register("r", "/" + obj.name, 256, SIZE - 256)
    array = regions.read_input("IN", ref("r", 8, 4), "INT32", (2,))
    np.testing.assert_array_equal(array.view(np.uint8), np.arange(4, 12, dtype=np.uint8))
    result = np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::2]  # not contiguous, cast
    regions.write_output("OUT", ref("r", 16, 32), "FP32", result)
    written = np.frombuffer(obj.read_bytes()[288:304], np.float32)
    np.testing.assert_array_equal(written, [0, 2, 3, 5])


def test_unregistering_while_a_request_holds_the_region_closes_nothing_under_it(
    registry: SharedMemoryRegistry, obj: Path
) -> None:
    regions = registry.owned_by(None)
    before = open_descriptors()
    regions.register("r", "/" + obj.name, 0, SIZE)
    assert open_descriptors() == before + 1
    held = regions._regions["r"]  # what a request reading or writing it holds
    regions.unregister("r")
    assert open_descriptors() == before + 1  # still open for the request that holds it
    os.fstat(held.fd)
    del held  # the request is done: the descriptor goes with it
    assert open_descriptors() == before
    regions.register("r", "/" + obj.name, 0, SIZE)
    registry.close()  # unregistering everything closes every descriptor
    assert open_descriptors() == before


def test_another_principals_region_answers_as_a_name_nobody_registered(
    registry: SharedMemoryRegistry, obj: Path
) -> None:
    owner, other = registry.owned_by("management"), registry.owned_by("inference")
    owner.register("theirs", "/" + obj.name, 0, SIZE)
    assert registry.owned_by(None).status() == [] and other.status() == []

    def answer(call: object) -> tuple[type, str]:
        with pytest.raises(InferplexError) as info:
            call()  # type: ignore[operator]
        return type(info.value), info.value.message

    for name in ("theirs", "nobody"):
        assert answer(lambda n=name: other.status(n)) == (
            RegionNotFoundError,
            f"no shared memory region '{name}' is registered",
        )
    for call in (
        lambda n: other.read_input("IN", ref(n, 4), "FP32", (1,)),
        lambda n: other.check_output("OUT", ref(n, 4)),
        lambda n: other.write_output("OUT", ref(n, 4), "FP32", np.ones(1, np.float32)),
    ):
        foreign, unknown = answer(lambda c=call: c("theirs")), answer(lambda c=call: c("nobody"))
        assert foreign == (InvalidInputError, unknown[1].replace("nobody", "theirs"))
    other.unregister("theirs")  # answers as for an unknown name (nothing), touches nothing
    other.unregister()
    assert [r["name"] for r in owner.status()] == ["theirs"]
    other.register("theirs", "/" + obj.name, 0, 8)  # names are each principal's own
    assert owner.status()[0]["byte_size"] == SIZE


def test_large_reads_leave_the_event_loop(registry: SharedMemoryRegistry, obj: Path) -> None:
    regions = registry.owned_by(None)
    regions.register("r", "/" + obj.name, 0, SIZE)
    on_loop = regions.on_loop
    small = on_loop.read_input("IN", ref("r", ON_LOOP_READ_BYTES), "UINT8", (ON_LOOP_READ_BYTES,))
    assert small.size == ON_LOOP_READ_BYTES
    for datatype, shape in (("UINT8", (ON_LOOP_READ_BYTES + 1,)), ("BYTES", (1,))):
        with pytest.raises(ReadOffLoop):
            on_loop.read_input("IN", ref("r", ON_LOOP_READ_BYTES + 1), datatype, shape)
    # the same regions, read in full off the loop
    regions.read_input("IN", ref("r", ON_LOOP_READ_BYTES + 1), "UINT8", (ON_LOOP_READ_BYTES + 1,))
    assert on_loop.status() == regions.status()


def test_a_tensor_read_is_bounded_like_a_request_body(obj: Path) -> None:
    registry = SharedMemoryRegistry(enabled=True, max_read_bytes=1000)
    regions = registry.owned_by(None)
    regions.register("r", "/" + obj.name, 0, SIZE)
    regions.read_input("IN", ref("r", 1000), "UINT8", (1000,))
    for datatype, shape in (("UINT8", (1001,)), ("BYTES", (1,))):
        with pytest.raises(PayloadTooLargeError, match="1001 is above the limit of 1000 bytes"):
            regions.read_input("IN", ref("r", 1001), datatype, shape)
    registry.close()


def test_a_principal_holds_a_bounded_number_of_regions(obj: Path) -> None:
    registry = SharedMemoryRegistry(enabled=True, max_regions=2)
    regions = registry.owned_by(None)
    regions.register("a", "/" + obj.name, 0, 8)
    regions.register("b", "/" + obj.name, 0, 8)
    with pytest.raises(TooManyRegionsError, match="INFERPLEX_MAX_SHARED_MEMORY_REGIONS \\(2\\)"):
        regions.register("c", "/" + obj.name, 0, 8)
    registry.owned_by("management").register("c", "/" + obj.name, 0, 8)  # its own count
    regions.unregister("a")
    regions.register("c", "/" + obj.name, 0, 8)
    registry.close()
