"""The lifecycle's record of each model, and the one way a model's state changes.

The registry (core) holds what is served and how it shows. What the lifecycle keeps to load,
reload, evict and unload a model — its files' fingerprints, measured footprints, the load
plan, the pin, the lock that serialises its loads — lives here in a :class:`ModelRecord`
per model, as Triton's ``ModelLifeCycle`` keeps its per-model info apart from the model.

A state changes only in :meth:`ModelRecords.transition`: the change is checked against
:data:`ALLOWED`, logged (one line carrying ``model``, ``state``, ``previous`` and ``reason``
fields for JSON logs), counted by (from, to) state (``inferplex_model_transitions`` on
/metrics), and published to the registry at once with the served versions when they change.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from inferplex.core.model import ModelVersion
from inferplex.core.registry import (
    NO_FAILURES,
    ModelEntry,
    ModelRegistry,
    ModelState,
    ModelStatus,
)
from inferplex.core.snapshot import TransitionCount
from inferplex.errors import InferplexError, unknown_model
from inferplex.lifecycle.planning import ModelPlan
from inferplex.lifecycle.reading import Facts

logger = logging.getLogger(__name__)

_S = ModelState
#: the states a model may go to from each state
ALLOWED: Mapping[ModelState, frozenset[ModelState]] = {
    # a load starts; an unload (or a refused load) of a model that serves nothing
    _S.UNAVAILABLE: frozenset({_S.LOADING, _S.UNAVAILABLE}),
    # a first load ends: it serves, or it failed
    _S.LOADING: frozenset({_S.READY, _S.UNAVAILABLE}),
    # a reload ends (the versions serving go on serving if it failed); an unload starts
    _S.READY: frozenset({_S.READY, _S.UNLOADING}),
    # the unloaded versions drained and were freed
    _S.UNLOADING: frozenset({_S.UNAVAILABLE}),
}


class Transition(NamedTuple):
    """A change of state, as counted."""

    source: ModelState
    target: ModelState


class TransitionError(InferplexError):
    """A state change :data:`ALLOWED` does not list: a fault in the lifecycle's code."""


class Measured(NamedTuple):
    """A version's footprint as last measured, with its files' fingerprint then."""

    fingerprint: str
    bytes: int


@dataclass(eq=False)
class ModelRecord:
    """What the lifecycle knows of one model. Its state and reason change only through
    :meth:`ModelRecords.transition`; its other fields are the loader's to keep."""

    #: the model as the registry serves it
    entry: ModelEntry
    state: ModelState = ModelState.UNAVAILABLE
    reason: str = "not loaded"
    #: the load plan of the served versions (None until a load succeeds)
    plan: ModelPlan | None = None
    #: fingerprint of the whole model folder, as last read (poll mode compares it)
    fingerprint: str = ""
    #: fingerprint of each served version's files
    version_fingerprints: dict[int, str] = field(default_factory=dict)
    #: measured bytes of each served version
    footprints: dict[int, int] = field(default_factory=dict)
    #: each version's last measurement, kept across unloads and evictions: the estimate of
    #: its next load while its files are the same
    measured: dict[int, Measured] = field(default_factory=dict)
    #: kept from eviction (a load request's ``pinned``)
    pinned: bool = False
    #: instances per version set at run time (None: as the config says)
    instance_count: int | None = None
    #: serialises loads, reloads and unloads of this model
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: counts loads, so the versions alive at once have distinct scheduler keys
    generation: int = 0

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def footprint(self) -> int:
        return sum(self.footprints.values())

    def estimate(self, versions: list[int], facts: Facts) -> int:
        """Bytes that loading ``versions`` will take: each one's last measured footprint
        while its files are those it was measured with (also after an unload or eviction),
        else its files' size."""
        total = 0
        for version in versions:
            fingerprint, size = facts[version]
            last = self.measured.get(version)
            total += last.bytes if last is not None and last.fingerprint == fingerprint else size
        return total

    def unchanged(self, plan: ModelPlan, facts: Facts) -> dict[int, ModelVersion]:
        """The served versions a reload by ``plan`` keeps: same config and backend, same
        files. A new config sets the instance count again."""
        kept = self.plan
        if kept is None or kept.config != plan.config or kept.backend is not plan.backend:
            self.instance_count = None
            return {}
        return {
            v: served
            for v, served in self.entry.versions.items()
            if v in facts and self.version_fingerprints.get(v) == facts[v].fingerprint
        }

    def keep(self, plan: ModelPlan, facts: Facts, kept: list[int], loaded: dict[int, int]) -> None:
        """Note a load by ``plan``: the ``kept`` versions and the newly ``loaded`` ones
        (version -> measured bytes) are what serves now."""
        self.plan = plan
        self.version_fingerprints = {v: facts[v].fingerprint for v in (*kept, *loaded)}
        self.footprints = {v: self.footprints[v] for v in kept} | loaded
        self.measured |= {v: Measured(facts[v].fingerprint, n) for v, n in loaded.items()}


class ModelRecords:
    """Every model the lifecycle knows, by name, beside its registry entry; the state
    changes of all of them pass :meth:`transition`."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry
        self._records: dict[str, ModelRecord] = {}
        #: state changes so far, by (from, to)
        self.transitions: Counter[Transition] = Counter()

    def add(self, name: str) -> ModelRecord:
        """The record of ``name``, created with its registry entry (not loaded) if new."""
        record = self._records.get(name)
        if record is None:
            record = self._records[name] = ModelRecord(self.registry.add(name))
        return record

    def get(self, name: str) -> ModelRecord | None:
        return self._records.get(name)

    def record(self, name: str) -> ModelRecord:
        record = self._records.get(name)
        if record is None:
            raise unknown_model(name)
        return record

    def all(self) -> list[ModelRecord]:
        """Every record, in name order."""
        return [self._records[name] for name in sorted(self._records)]

    def forget(self, name: str) -> None:
        """Drop a model that serves nothing (it left the repository), here and in the
        registry."""
        record = self._records.get(name)
        if record is not None and not record.entry.versions:
            del self._records[name]
            self.registry.forget(name)

    def counts(self) -> tuple[TransitionCount, ...]:
        """The state changes so far, for the metrics snapshot."""
        counts = (
            TransitionCount(t.source.value, t.target.value, n) for t, n in self.transitions.items()
        )
        return tuple(sorted(counts, key=lambda c: (c.source, c.target)))

    def transition(
        self,
        record: ModelRecord,
        to: ModelState,
        reason: str = "",
        *,
        versions: dict[int, ModelVersion] | None = None,
        failed: Mapping[int, str] = NO_FAILURES,
        error: bool = False,
        detail: str = "",
    ) -> None:
        """Change ``record``'s state to ``to`` (TransitionError where :data:`ALLOWED` does
        not list it, nothing changed), log and count it, and publish it to the registry —
        with ``versions`` as the served set where given, in the same step.

        ``reason``: why the model is in the state (the index shows it); ``failed``: the
        versions whose load failed, with why; ``error``: the change is a failed load
        (logged as an error; a model that serves nothing is marked failed for strict
        readiness); ``detail``: what the log line adds in parentheses instead of the
        reason."""
        source = record.state
        if to not in ALLOWED[source]:
            raise TransitionError(
                f"model '{record.name}' cannot go from {source.value} to {to.value}"
            )
        changed = to is not source or reason != record.reason
        record.state, record.reason = to, reason
        self.transitions[Transition(source, to)] += 1
        status = ModelStatus(to, reason, failed, error and to is ModelState.UNAVAILABLE)
        # the plan's config is the served one from the switch on (a first load shows its
        # config while it loads: the config endpoint answers then)
        config = record.plan.config if versions and record.plan is not None else None
        self.registry.publish(record.entry, status, versions, config)
        _log(record, source, error, detail, changed)


def _log(record: ModelRecord, source: ModelState, error: bool, detail: str, changed: bool) -> None:
    """One line per state change, with the fields a log pipeline filters on; a change to
    the same state and reason without anything to add is debug detail."""
    name, state, reason = record.name, record.state, record.reason
    extra = {"model": name, "state": state.value, "previous": source.value, "reason": reason}
    if error:
        if state is ModelState.UNAVAILABLE:
            logger.error("model '%s' failed to load: %s", name, detail or reason, extra=extra)
        else:
            logger.error("model '%s': %s", name, reason, extra=extra)
        return
    why = detail or reason
    text = f"model '{name}' {state.value}" + (f" ({why})" if why else "")
    logger.log(logging.INFO if changed or detail else logging.DEBUG, "%s", text, extra=extra)
