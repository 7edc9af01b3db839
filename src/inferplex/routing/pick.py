"""WeightedPicker: which target of a split route answers a request.

Each target owns a slice of [0, 1) as wide as its share of the weights, in the order the
route lists them. A request without a key lands at a random point; a request with a key at a
point given by a stable hash of the key, so the same key always reaches the same target (and
in every server process, unlike Python's salted ``hash``). Growing the last target's weight
(a canary ramp-up) only moves keys into it: keys already on the canary stay there.
"""

from __future__ import annotations

import bisect
import hashlib
import random

_SCALE = 1.0 / 2**64


def key_point(key: str) -> float:
    """A stable point in [0, 1) for ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") * _SCALE


class WeightedPicker:
    def __init__(self, weights: list[float], seed: int | None = None) -> None:
        total = sum(weights)
        if total <= 0 or any(w < 0 for w in weights):
            raise ValueError("weights must be >= 0 and add up to more than 0")
        bounds: list[float] = []
        running = 0.0
        for weight in weights:
            running += weight
            bounds.append(running / total)
        bounds[-1] = 1.0  # rounding must not leave a gap at the top
        self._bounds = bounds
        self._rng = random.Random(seed)

    def pick(self, key: str | None = None) -> int:
        """The index of the target for a request (with a sticky key, or None)."""
        point = self._rng.random() if key is None else key_point(key)
        # bisect_right skips zero-weight targets: their slice is empty
        return bisect.bisect_right(self._bounds, point)
