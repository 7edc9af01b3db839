"""The one kind of cache both V2 codecs keep: the layouts of messages seen before.

A client sends the same request again and again but for its tensors' bytes (perf_analyzer,
tritonclient), so each codec remembers what it decoded of a message's fixed part (REST: the
JSON header of a binary request; gRPC: the bytes before the raw contents, and the response
built for outputs of the same names, datatypes and shapes) and skips the parse the next time.
What a layout is belongs to each wire format; how many are kept, which goes first and the
lock are here, once.
"""

from __future__ import annotations

import threading
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LayoutCache(dict[K, V]):
    """Layouts by key, at most ``kept`` of them; the oldest goes first. A lookup is a plain
    dict lookup (the hot path: no lock, no call of ours); :meth:`keep` takes the lock, as
    large messages are decoded in worker threads."""

    __slots__ = ("_lock", "kept")

    def __init__(self, kept: int) -> None:
        super().__init__()
        self.kept = kept
        self._lock = threading.Lock()

    def keep(self, key: K, value: V) -> None:
        """Remember ``value`` for ``key``, forgetting the oldest layout when full."""
        with self._lock:
            if key not in self and len(self) >= self.kept:
                del self[next(iter(self))]
            self[key] = value
