"""Rate-limiter resources (Triton's ``instance_group.rate_limiter.resources``): named tokens a
model's execution holds while it runs, counted against each resource's total.

The total of a resource is the amount given to the server, or by default the largest amount
any registered model asks for, so every model can run alone. Pure bookkeeping: the scheduler
decides who asks (``core/scheduler.py``, "Resources").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from inferplex.errors import ConfigError


class Need(NamedTuple):
    """Tokens of one resource an execution holds."""

    name: str
    amount: int


#: what one execution of a model holds: counts > 0, sorted by resource name
Needs = tuple[Need, ...]


def needs_of(resources: Mapping[str, int]) -> Needs:
    """A model's config ``resources`` as held tokens (resources of count 0 hold nothing)."""
    return tuple(Need(name, count) for name, count in sorted(resources.items()) if count)


class ResourcePool:
    """The totals of the resources and the tokens running executions hold."""

    __slots__ = ("_explicit", "_totals", "_used")

    def __init__(self, explicit: Mapping[str, int] | None) -> None:
        given = dict(explicit or {})
        for name, count in given.items():
            if not isinstance(count, int) or count < 0:
                raise ValueError(f"resource {name!r} needs a count >= 0, got {count!r}")
        self._explicit = given
        self._totals: dict[str, int] = dict(given)
        self._used: dict[str, int] = {}

    @property
    def totals(self) -> dict[str, int]:
        """The total of each resource: explicit, or the largest amount a model asks for."""
        return dict(self._totals)

    def free(self) -> dict[str, int]:
        """Tokens of each resource not held by a running execution."""
        return {name: total - self._used.get(name, 0) for name, total in self._totals.items()}

    def check(self, key: str, resources: Mapping[str, int]) -> None:
        """Refuse a model's ``resources`` that are negative or that it could never hold (more
        than an explicit total)."""
        for name, count in resources.items():
            if not isinstance(count, int) or count < 0:
                raise ConfigError(f"model {key!r}: resource {name!r} count must be >= 0: {count!r}")
            total = self._explicit.get(name)
            if total is not None and count > total:
                raise ConfigError(
                    f"model {key!r} needs {count} of resource {name!r} but the server has only "
                    f"{total}, so it could never run; raise the resource's count or lower the "
                    "model's rate_limiter requirement"
                )

    def recount(self, registered: Iterable[Needs]) -> None:
        """Set the default totals from what the registered models ask for."""
        totals = dict(self._explicit)
        for needs in registered:
            for name, count in needs:
                if name not in self._explicit:
                    totals[name] = max(totals.get(name, 0), count)
        self._totals = totals

    def fits(self, needs: Needs) -> bool:
        """Whether every token of ``needs`` is free now."""
        totals, used = self._totals, self._used
        return all(count <= totals.get(name, 0) - used.get(name, 0) for name, count in needs)

    def held_back(self, needs: Needs, reserved: set[str] | None) -> set[str] | None:
        """None when an execution needing ``needs`` may start now; else the resources held
        back for it and the candidates before it (``reserved``, extended when it does not
        fit), so that one needing many tokens does not starve behind small consumers."""
        if reserved and any(name in reserved for name, _ in needs):
            return reserved
        if self.fits(needs):
            return None
        held = reserved if reserved is not None else set()
        held.update(name for name, _ in needs)
        return held

    def take(self, needs: Needs) -> None:
        """An execution starts holding ``needs``."""
        for name, count in needs:
            self._used[name] = self._used.get(name, 0) + count

    def give_back(self, needs: Needs) -> None:
        """An execution that held ``needs`` ended."""
        for name, count in needs:
            self._used[name] -= count
