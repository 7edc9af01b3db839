import numpy as np

from inferplex.core.cache import ResponseCache


def feeds(value: float) -> dict[str, np.ndarray]:
    return {"x": np.full((1, 4), value, dtype=np.float32)}


def test_identical_requests_share_a_key_and_others_do_not() -> None:
    key = ResponseCache.key
    assert key("m/1", feeds(1), ["y"]) == key("m/1", feeds(1), ["y"])
    assert key("m/1", feeds(1), ["y"]) != key("m/1", feeds(2), ["y"])
    assert key("m/1", feeds(1), ["y"]) != key("m/2", feeds(1), ["y"])
    assert key("m/1", feeds(1), ["y"]) != key("m/1", feeds(1), ["z"])
    reshaped = {"x": np.full((2, 2), 1, dtype=np.float32)}
    assert key("m/1", feeds(1), ["y"]) != key("m/1", reshaped, ["y"])
    as_int = {"x": np.full((1, 4), 1, dtype=np.int32)}
    assert key("m/1", feeds(1), ["y"]) != key("m/1", as_int, ["y"])


def test_bytes_inputs_are_hashed() -> None:
    a = {"s": np.array([[b"ab", b"c"]], dtype=object)}
    b = {"s": np.array([[b"a", b"bc"]], dtype=object)}
    assert ResponseCache.key("m/1", a, []) != ResponseCache.key("m/1", b, [])


def test_lru_eviction_by_bytes() -> None:
    cache = ResponseCache(max_bytes=64)
    for i in range(3):
        cache.put(bytes([i]), {"y": np.zeros(8, dtype=np.float32)})  # 32 bytes each
    assert len(cache) == 2 and cache.used_bytes == 64
    assert cache.get(bytes([0])) is None
    assert cache.get(bytes([1])) is not None
    cache.put(bytes([3]), {"y": np.zeros(8, dtype=np.float32)})
    assert cache.get(bytes([2])) is None  # 1 was used more recently than 2
    assert cache.get(bytes([1])) is not None


def test_cached_outputs_are_copies_and_read_only() -> None:
    cache = ResponseCache(max_bytes=1024)
    batch = np.arange(8, dtype=np.float32)
    cache.put(b"k", {"y": batch[:2]})
    stored = cache.get(b"k")
    assert stored is not None
    batch[0] = 99
    assert stored["y"][0] == 0
    assert not stored["y"].flags.writeable


def test_answer_larger_than_the_cache_is_not_kept() -> None:
    cache = ResponseCache(max_bytes=16)
    cache.put(b"k", {"y": np.zeros(8, dtype=np.float32)})
    assert len(cache) == 0 and cache.used_bytes == 0
