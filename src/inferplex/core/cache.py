"""ResponseCache: a server-wide LRU of inference results, bounded in bytes.

Models opt in with ``response_cache { enable: true }``; the key is a hash of the model version,
the inputs (names, datatypes, shapes and bytes) and the requested outputs, so only identical
requests share an answer.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from inferplex.datatypes import serialize_bytes

Outputs = dict[str, np.ndarray]


def _nbytes(outputs: Outputs) -> int:
    return sum(
        len(serialize_bytes(a)) if a.dtype == np.object_ else a.nbytes for a in outputs.values()
    )


class ResponseCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self._entries: OrderedDict[bytes, tuple[Outputs, int]] = OrderedDict()

    @staticmethod
    def key(model_key: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> bytes:
        digest = hashlib.blake2b(model_key.encode(), digest_size=16)
        for name in sorted(feeds):
            array = feeds[name]
            digest.update(f"\0{name}\0{array.dtype.str}\0{array.shape}\0".encode())
            if array.dtype == np.object_:
                digest.update(serialize_bytes(array))
            else:
                digest.update(np.ascontiguousarray(array).data)
        digest.update("\0".join(outputs).encode())
        return digest.digest()

    def get(self, key: bytes) -> Outputs | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: bytes, outputs: Outputs) -> None:
        """Keep a copy of ``outputs`` (never a view of a larger batch), evicting the least
        recently used entries to stay within ``max_bytes``; too large an answer is not kept."""
        if key in self._entries:
            return
        kept = {name: np.array(array, copy=True) for name, array in outputs.items()}
        for array in kept.values():
            array.flags.writeable = False
        size = _nbytes(kept)
        if size > self.max_bytes:
            return
        while self.used_bytes + size > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.used_bytes -= evicted
        self._entries[key] = (kept, size)
        self.used_bytes += size

    def __len__(self) -> int:
        return len(self._entries)
