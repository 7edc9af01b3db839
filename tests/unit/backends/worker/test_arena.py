"""The shared-memory arena: tensors written on one side read back on the other."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from inferplex.backends.worker.arena import ALIGNMENT, Arena


@pytest.fixture
def pair() -> Iterator[tuple[Arena, Arena]]:
    """Two arenas over one memfd, as the server and its worker hold it."""
    server = Arena.create(4096)
    worker = Arena(os.dup(server.fd))
    yield server, worker
    server.close()
    worker.close()


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int16", "int32", "int64", "uint64", "float16", "float32", "float64"]
)
def test_numeric_tensors_round_trip(pair: tuple[Arena, Arena], dtype: str) -> None:
    server, worker = pair
    array = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    headers, end = server.write({"x": array}, start=10)
    assert headers[0][3] % ALIGNMENT == 0 and headers[0][3] >= 10
    assert end >= headers[0][3] + array.nbytes
    out = worker.read(headers, copy=False)["x"]
    assert out.dtype == array.dtype and out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, array)


def test_views_share_the_memory_and_copies_do_not(pair: tuple[Arena, Arena]) -> None:
    server, worker = pair
    headers, _ = server.write({"x": np.zeros(4, np.float32)})
    view = worker.read(headers, copy=False)["x"]
    copy = worker.read(headers, copy=True)["x"]
    server.write({"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(view, np.ones(4))
    np.testing.assert_array_equal(copy, np.zeros(4))


def test_non_contiguous_and_empty_arrays(pair: tuple[Arena, Arena]) -> None:
    server, worker = pair
    base = np.arange(32, dtype=np.int32).reshape(4, 8)
    tensors = {"strided": base[:, ::2], "transposed": base.T, "empty": np.zeros((0, 3))}
    headers, _ = server.write(tensors)
    out = worker.read(headers, copy=True)
    for name, array in tensors.items():
        np.testing.assert_array_equal(out[name], array)
        assert out[name].shape == array.shape


def test_bytes_tensors_in_the_v2_layout(pair: tuple[Arena, Arena]) -> None:
    server, worker = pair
    objects = np.array([[b"\x00\xffraw", b""], [b"abc", b"d" * 300]], dtype=object)
    headers, _ = server.write(
        {"obj": objects, "str": np.array(["héllo", "x"]), "fixed": np.array([b"ab", b"c"])}
    )
    kinds = {h[0]: h[1] for h in headers}
    assert set(kinds.values()) == {"BYTES"}
    out = worker.read(headers, copy=False)
    assert out["obj"].dtype == object and out["obj"].shape == (2, 2)
    assert out["obj"].tolist() == objects.tolist()
    assert out["str"].tolist() == ["héllo".encode(), b"x"]
    assert out["fixed"].tolist() == [b"ab", b"c"]


def test_the_writer_grows_the_arena_and_the_reader_follows(pair: tuple[Arena, Arena]) -> None:
    server, worker = pair
    small, _ = server.write({"x": np.ones(8, np.float64)})
    old_view = worker.read(small, copy=False)["x"]
    big = np.arange(100_000, dtype=np.float64)
    headers, end = worker.write({"y": big}, start=Arena.end(small))
    assert worker.size >= end > 4096
    np.testing.assert_array_equal(server.read(headers, copy=False)["y"], big)
    np.testing.assert_array_equal(old_view, np.ones(8))  # the old mapping stays valid


def test_a_header_past_the_file_is_refused(pair: tuple[Arena, Arena]) -> None:
    _, worker = pair
    with pytest.raises(ValueError, match="past its size"):
        worker.read([("x", "<f4", (10,), 1 << 20, 40)], copy=False)


def _bytes_array(items: list[bytes]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


_arrays = st.one_of(
    hnp.arrays(
        st.sampled_from(["<f4", "<i8", "|u1", "|b1", ">f8", "<f2"]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
    ),
    st.lists(st.binary(max_size=40), max_size=6).map(_bytes_array),
)


@settings(max_examples=60, deadline=None)
@given(tensors=st.dictionaries(st.text(min_size=1, max_size=5), _arrays, max_size=4),
       start=st.integers(0, 5000))  # fmt: skip
def test_any_tensors_round_trip(tensors: dict[str, np.ndarray], start: int) -> None:
    server = Arena.create(256)
    worker = Arena(os.dup(server.fd))
    try:
        headers, end = server.write(tensors, start)
        assert all(h[3] >= start and h[3] % ALIGNMENT == 0 for h in headers)
        out = worker.read(headers, copy=True)
        assert out.keys() == tensors.keys()
        for name, array in tensors.items():
            assert out[name].shape == array.shape
            np.testing.assert_array_equal(out[name], array)
        assert end == Arena.end(headers, start)
    finally:
        server.close()
        worker.close()
