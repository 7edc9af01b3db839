"""The paged KV cache's bookkeeping: which fixed-size blocks of the pool are free, which
each sequence holds, and which full blocks are kept for reuse by later prompts with the same
prefix (prefix caching). Pure: no torch, no clock; the tensors live in ``kv_cache.py``.

A full block is known by its key: the key of the block before it and its own tokens, so a
block matches only where the whole prefix up to it matches. A block whose last holder let
go stays cached (evictable, least recently freed first) until a new allocation needs it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

#: a full block's identity: (the hash of its parent's key, or 0 for the first; its tokens)
BlockKey = tuple[int, tuple[int, ...]]


def block_keys(tokens: Sequence[int], block_size: int, count: int) -> list[BlockKey]:
    """The keys of the first ``count`` full blocks of ``tokens``."""
    keys: list[BlockKey] = []
    parent = 0
    for index in range(count):
        key = (parent, tuple(tokens[index * block_size : (index + 1) * block_size]))
        keys.append(key)
        parent = hash(key)
    return keys


@dataclass(slots=True)
class PrefixStats:
    """Prefix-cache lookups: blocks asked for and blocks found."""

    queried: int = 0
    hit: int = 0


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` token slots, with reference counts."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a block pool needs at least one block of at least one slot")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # popped from the end
        self._refs = [0] * num_blocks
        #: cached full blocks by key, and the key each cached block is known by
        self._cached: dict[BlockKey, int] = {}
        self._key_of: dict[int, BlockKey] = {}
        #: cached blocks nobody holds, least recently freed first
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self.stats = PrefixStats()

    @property
    def available(self) -> int:
        """Blocks an allocation can take now (free, or cached and held by nobody)."""
        return len(self._free) + len(self._evictable)

    @property
    def used(self) -> int:
        """Blocks held by at least one sequence."""
        return self.num_blocks - self.available

    def allocate(self, count: int) -> list[int] | None:
        """``count`` blocks held once each, or None (nothing taken) when too few are left."""
        if count > self.available:
            return None
        taken: list[int] = []
        for _ in range(count):
            if self._free:
                block = self._free.pop()
            else:  # the least recently freed cached block leaves the cache
                block, _ = self._evictable.popitem(last=False)
                del self._cached[self._key_of.pop(block)]
            self._refs[block] = 1
            taken.append(block)
        return taken

    def match(self, keys: Sequence[BlockKey]) -> list[int]:
        """The cached blocks of the longest prefix of ``keys``, each now held once more."""
        if not self.prefix_caching:
            return []
        found: list[int] = []
        for key in keys:
            block = self._cached.get(key)
            if block is None:
                break
            if self._refs[block] == 0:
                del self._evictable[block]
            self._refs[block] += 1
            found.append(block)
        self.stats.queried += len(keys)
        self.stats.hit += len(found)
        return found

    def register(self, block: int, key: BlockKey) -> None:
        """``block`` now holds the full block ``key``: later prompts may share it."""
        if not self.prefix_caching or block in self._key_of or key in self._cached:
            return  # already known (a block with the same tokens serves as well)
        self._cached[key] = block
        self._key_of[block] = key

    def release(self, blocks: Sequence[int]) -> None:
        """The holder of ``blocks`` lets them go (a finished, cancelled or preempted one)."""
        for block in reversed(blocks):  # the tail first: it is evicted before the head
            refs = self._refs[block] - 1
            if refs < 0:
                raise ValueError(f"block {block} released more often than held")
            self._refs[block] = refs
            if refs == 0:
                if block in self._key_of:
                    self._evictable[block] = None
                else:
                    self._free.append(block)
