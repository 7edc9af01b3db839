"""The KV block pool: allocation under the pool's size, release, reference counts, prefix
caching by hash chain, eviction of cached blocks nobody holds."""

from __future__ import annotations

import pytest

from inferplex.backends.llm.blocks import BlockPool, block_keys


def test_allocates_until_the_pool_is_empty_and_never_beyond() -> None:
    pool = BlockPool(4, 2)
    first = pool.allocate(3)
    assert first is not None and len(set(first)) == 3
    assert pool.allocate(2) is None  # nothing is taken by a refused allocation
    assert pool.available == 1 and pool.used == 3
    pool.release(first)
    assert pool.available == 4 and pool.used == 0


def test_a_block_released_more_often_than_held_is_an_error() -> None:
    pool = BlockPool(2, 2)
    blocks = pool.allocate(1)
    assert blocks is not None
    pool.release(blocks)
    with pytest.raises(ValueError, match="released more often"):
        pool.release(blocks)


def test_keys_chain_so_a_block_matches_only_after_the_same_prefix() -> None:
    a = block_keys([1, 2, 3, 4, 5, 6], 2, 3)
    b = block_keys([9, 9, 3, 4, 5, 6], 2, 3)
    assert a[1][1] == b[1][1] == (3, 4)  # the same tokens ...
    assert a[1] != b[1]  # ... after another prefix: another block


def test_full_blocks_are_shared_and_held_once_more_per_match() -> None:
    pool = BlockPool(8, 2)
    keys = block_keys([1, 2, 3, 4, 5], 2, 2)
    blocks = pool.allocate(3)
    assert blocks is not None
    for block, key in zip(blocks, keys, strict=False):
        pool.register(block, key)
    assert pool.match(keys) == blocks[:2]
    assert pool.stats.queried == 2 and pool.stats.hit == 2
    pool.release(blocks)  # the first holder goes: the shared blocks stay held
    assert pool.used == 2
    pool.release(blocks[:2])
    assert pool.used == 0


def test_a_cached_block_nobody_holds_is_found_again_until_evicted() -> None:
    pool = BlockPool(3, 2)
    keys = block_keys([1, 2, 3, 4], 2, 2)
    blocks = pool.allocate(2)
    assert blocks is not None
    pool.register(blocks[0], keys[0])
    pool.register(blocks[1], keys[1])
    pool.release(blocks)
    assert pool.available == 3  # evictable blocks count as available
    assert pool.match(keys) == blocks
    pool.release(blocks)
    # the pool is used up: the cached blocks are evicted, the tail first
    taken = pool.allocate(2)
    assert taken is not None and blocks[1] in taken
    assert pool.match(keys) == [blocks[0]]


def test_without_prefix_caching_nothing_is_matched() -> None:
    pool = BlockPool(4, 2, prefix_caching=False)
    keys = block_keys([1, 2], 2, 1)
    blocks = pool.allocate(1)
    assert blocks is not None
    pool.register(blocks[0], keys[0])
    assert pool.match(keys) == []
