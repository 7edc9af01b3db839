"""What the engine hands its observers (the metrics port, the dashboard) instead of its
registry: every model with its state and served versions, and the counters each keeps.

A snapshot is built on the event loop in one pass (``InferenceEngine.snapshot``), at a scrape
or a sampler tick, never per request. ``stats`` is the version's own statistics object, not
a copy: read it on the loop, as the data path writes it there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from inferplex.backends.engine_stats import EngineStats
from inferplex.core.stats import ModelStats


@dataclass(frozen=True, slots=True)
class VersionSnapshot:
    """One served version."""

    version: str
    stats: ModelStats
    #: requests waiting in its queue
    pending: int
    instances: int
    #: requests accepted and not answered yet
    in_flight: int
    #: bytes the version took when loaded, where the lifecycle measured it
    memory: int | None
    #: its generative engine's state and totals (an LLM's), else None
    llm_engine: EngineStats | None = None


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """One model name: its state, why it is in it, its served versions in version order."""

    name: str
    state: str
    reason: str
    versions: tuple[VersionSnapshot, ...]


@dataclass(frozen=True, slots=True)
class TransitionCount:
    """How many times models went from one state to another (the lifecycle counts them)."""

    source: str
    target: str
    count: int


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    server_name: str
    ready: bool
    #: in name order
    models: tuple[ModelSnapshot, ...]
    #: the models' state changes since the start, by (from, to) state
    transitions: tuple[TransitionCount, ...] = ()

    def served(self) -> Iterator[tuple[ModelSnapshot, VersionSnapshot]]:
        """Every served version with its model, in name and version order."""
        for model in self.models:
            for version in model.versions:
                yield model, version
