"""The consistent-hash ring that places models on replicas: one implementation, used by the
replicas (which models to load at start) and by the nginx configuration generator (where to
send each model's requests), so the two cannot disagree.

Each replica sits at ``VIRTUAL_NODES`` points of a 64-bit ring (the MD5 of ``name#i``); a
model sits at the MD5 of its name. Its owners are the first ``k`` distinct replicas clockwise
from its point. Adding or removing a replica moves only the models whose first ``k`` owners
change (about ``k/N`` of them), and the replicas that stay keep everything else.

MD5 is used for spread, not security: it is the same in every process and on every machine
(Python's ``hash()`` is not).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from inferplex.config.readers import read_model_config
from inferplex.errors import ConfigError

#: points per replica: enough that each of a few replicas gets its share within a few percent
VIRTUAL_NODES = 160
#: the model config parameter that sets a model's own number of owners
COPIES_PARAMETER = "mesh_copies"


def _point(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode()).digest()[:8], "big")


class Ring:
    """Replicas on a consistent-hash ring; ``owners`` places a model."""

    def __init__(self, replicas: Sequence[str]) -> None:
        if not replicas:
            raise ConfigError("the mesh needs at least one replica")
        if len(set(replicas)) != len(replicas):
            raise ConfigError(f"a replica is named twice in {list(replicas)}")
        self.replicas = tuple(replicas)
        points = sorted((_point(f"{r}#{i}"), r) for r in replicas for i in range(VIRTUAL_NODES))
        self._points = [p for p, _ in points]
        self._names = [r for _, r in points]

    def owners(self, model: str, k: int) -> tuple[str, ...]:
        """The first ``k`` distinct replicas clockwise from ``model`` (all of them, in ring
        order, when ``k`` is at least their number)."""
        wanted = min(k, len(self.replicas))
        found: list[str] = []
        start = bisect.bisect(self._points, _point(model))
        for offset in range(len(self._names)):
            name = self._names[(start + offset) % len(self._names)]
            if name not in found:
                found.append(name)
                if len(found) == wanted:
                    break
        return tuple(found)


def copies(model_dir: Path, default: int) -> int:
    """How many replicas own the model in ``model_dir``: its config's ``mesh_copies``
    parameter, else ``default``. Blocking (reads the config file)."""
    try:
        config = read_model_config(model_dir)
    except ConfigError:
        return default  # the load reports a broken config; placement only needs a number
    raw = config.parameters.get(COPIES_PARAMETER) if config is not None else None
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"model '{model_dir.name}': parameter {COPIES_PARAMETER} must be a whole number "
            f"of at least 1, got {raw!r}"
        )
    return int(raw)


def copies_by_model(repository: Path, models: Iterable[str], default: int) -> dict[str, int]:
    """Each model's number of owners: its own ``mesh_copies`` or ``default``. Blocking."""
    return {m: copies(repository / m, default) for m in models}
