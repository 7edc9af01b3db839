"""ModelRegistry: the models known to the server, what each serves, how it shows, and routing.

The registry is the table the data path reads (``route``). It owns what is served — each
model's served versions, its default version, the config as last read, and its state and
reason as the serving side shows them (:class:`ModelStatus`) — and changes them only in
:meth:`ModelRegistry.publish`: one call on the event loop, so a request sees the old served
set and status or the new ones, never a mix. What is loaded, reloaded and unloaded, and why,
is decided in ``inferplex.lifecycle``, which keeps its own record of each model (files,
footprints, locks, the load plan) and publishes every state change here.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from inferplex.config.model_config import ModelConfig
from inferplex.core.model import ModelVersion
from inferplex.core.scheduler import ModelPolicy
from inferplex.core.snapshot import ModelSnapshot, VersionSnapshot
from inferplex.core.stats import ACTIVITY
from inferplex.core.status import StatusSignal
from inferplex.errors import (
    UNKNOWN_MODEL,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    unknown_model,
)

_monotonic = time.monotonic


class ModelState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


class Step(NamedTuple):
    """A model that an ensemble or a cascade calls."""

    label: str  # how messages name it: "step 2 'resize'", "light model 'small'"
    model: str
    version: str  # "" for the default version
    #: the rows a batch it is sent may hold (the caller's max_batch_size); 0: not checked
    rows: int


#: no version failed its last load
NO_FAILURES: Mapping[int, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """How a model shows to the serving side (the index, readiness, errors): published as a
    whole by the lifecycle with each state change."""

    state: ModelState = ModelState.UNAVAILABLE
    #: why it is in that state ("" while it serves normally)
    reason: str = "not loaded"
    #: versions that failed their last load, with the reason (rows of the index)
    failed: Mapping[int, str] = field(default_factory=lambda: NO_FAILURES)
    #: the last load of this model, with nothing served, failed (until it loads or unloads)
    load_failed: bool = False


@dataclass(eq=False)
class ModelEntry:
    """One model name as it is served. Written only by :meth:`ModelRegistry.publish` (and
    ``route``, which notes the time of each use); the lifecycle keeps the rest."""

    name: str
    status: ModelStatus = ModelStatus()
    #: the model's config as last read (also while no version serves, for ``/config``)
    config: ModelConfig | None = None
    #: the versions that serve requests; replaced as a whole by ``ModelRegistry.publish``
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    #: where unversioned requests go (None while nothing is served)
    default: ModelVersion | None = None
    #: the version an operator chose for unversioned requests; None = the highest
    default_version: int | None = None
    #: the models an ensemble or a cascade calls; it serves only while each of them does
    #: (set by ``ModelRegistry.publish`` from the served config)
    steps: tuple[Step, ...] = ()
    #: monotonic time of the last routed request (or of the first load)
    last_used: float = 0.0

    @property
    def state(self) -> ModelState:
        return self.status.state

    @property
    def reason(self) -> str:
        return self.status.reason

    @property
    def in_flight(self) -> int:
        return sum(v.in_flight for v in self.versions.values())


class ModelRegistry:
    """Name -> :class:`ModelEntry`; routes requests to served versions."""

    def __init__(self) -> None:
        self._entries: dict[str, ModelEntry] = {}
        #: fired when a model appears, leaves or changes its served versions (what its
        #: readiness depends on; the loader sets a state in the same turn as it publishes)
        self.status = StatusSignal()

    # -- the table ----------------------------------------------------------------------------
    def add(self, name: str) -> ModelEntry:
        """The entry of ``name``, created (not loaded) if it is new."""
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = ModelEntry(name)
            self.status.fire()
        return entry

    def forget(self, name: str) -> None:
        """Drop a model that has no served version (it left the repository)."""
        entry = self._entries.get(name)
        if entry is not None and not entry.versions:
            del self._entries[name]
            self.status.fire()

    def publish(
        self,
        entry: ModelEntry,
        status: ModelStatus,
        versions: dict[int, ModelVersion] | None = None,
        config: ModelConfig | None = None,
    ) -> None:
        """Show ``entry`` with ``status`` and, where given, make ``versions`` its served set
        and ``config`` its config — at once (the atomic switch). The lifecycle calls it with
        each state change (``lifecycle/records.py``), and with the config of a model that
        starts loading."""
        if config is not None:
            entry.config = config
        if versions is not None:
            self._serve(entry, versions)
        entry.status = status
        ACTIVITY.count += 1
        self.status.fire()

    def _serve(self, entry: ModelEntry, versions: dict[int, ModelVersion]) -> None:
        if versions and not entry.versions:  # a model that starts to serve counts as used
            entry.last_used = _monotonic()
        if entry.default_version is not None and entry.default_version not in versions:
            entry.default_version = None
        entry.versions = versions
        entry.default = (
            versions[entry.default_version if entry.default_version is not None else max(versions)]
            if versions
            else None
        )
        entry.steps = _steps(entry.default.config) if entry.default else ()

    def set_default_version(self, name: str, version: str) -> None:
        """Route unversioned requests to ``version`` (a served one); "" = the highest."""
        entry = self.entry(name)
        if not version:
            entry.default_version = None
        else:
            number = int(version) if version.isdigit() else None
            if number is None or number not in entry.versions:
                raise InvalidInputError(
                    f"model '{name}' does not serve version '{version}', served versions: "
                    f"{_listing(entry)}"
                )
            entry.default_version = number
        self.publish(entry, entry.status, entry.versions)

    # -- lookups --------------------------------------------------------------------------
    def get(self, name: str) -> ModelEntry | None:
        return self._entries.get(name)

    def entry(self, name: str) -> ModelEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise unknown_model(name) from None

    def entries(self) -> list[ModelEntry]:
        return [self._entries[name] for name in sorted(self._entries)]

    def route(self, name: str, version: str = "") -> ModelVersion:
        """The version that serves a request: the given one, else the default (highest).
        ModelNotReadyError for an ensemble or cascade one of whose steps cannot serve."""
        entry = self._entries.get(name)
        if entry is None:
            raise unknown_model(name)
        served = _pick(entry, version)
        if entry.steps:
            self._check_steps(entry, (name,))
        entry.last_used = _monotonic()
        return served

    def ready(self, name: str, version: str = "") -> bool:
        """Whether ``route`` would serve the model now (False while it has no ready version
        or an ensemble's step cannot serve), without counting as a use; ModelNotFoundError
        for an unknown model or version, as ``route``."""
        entry = self.entry(name)
        try:
            _pick(entry, version)
            if entry.steps:
                self._check_steps(entry, (name,))
        except ModelNotReadyError:
            return False
        return entry.state is ModelState.READY

    def all_ready(self) -> bool:
        """Whether no model is loading or unloading and none failed its last load (whole or
        one version): tritonserver's strict readiness. Models never loaded, or unloaded,
        do not count."""
        return not any(
            status.state in (ModelState.LOADING, ModelState.UNLOADING)
            or status.load_failed
            or status.failed
            for status in (entry.status for entry in self._entries.values())
        )

    def _check_steps(self, entry: ModelEntry, path: tuple[str, ...]) -> None:
        """ModelNotReadyError naming the first step of ``entry`` that cannot serve (a step
        that is itself an ensemble, with its steps; a step that takes fewer rows a batch than
        ``entry`` sends it); ``path``: the ensembles on the way, so ensembles that call each
        other end instead of recursing."""
        for label, model, version, rows in entry.steps:
            step = self._entries.get(model)
            try:
                if step is None:
                    raise unknown_model(model)
                served = _pick(step, version)
                if step.steps and model not in path:
                    self._check_steps(step, (*path, model))
            except (ModelNotFoundError, ModelNotReadyError) as exc:
                raise ModelNotReadyError(
                    f"model '{entry.name}' is not ready: its {label} is not available: "
                    f"{exc.message}"
                ) from None
            limit = served.config.max_batch_size
            if rows and served.config.batched and limit < rows:
                raise ModelNotReadyError(
                    f"model '{entry.name}' is not ready: its {label} takes at most {limit} "
                    f"rows a batch (its max_batch_size), fewer than the {rows} of this model's "
                    "max_batch_size; raise the one or lower the other"
                )

    def _serving_state(self, entry: ModelEntry) -> tuple[str, str]:
        """The state and reason the index shows for the served versions of ``entry``: an
        ensemble whose step cannot serve is UNAVAILABLE, with the step and why."""
        try:
            if entry.steps:
                self._check_steps(entry, (entry.name,))
        except ModelNotReadyError as exc:
            return ModelState.UNAVAILABLE.value, exc.message
        return entry.state.value, entry.reason

    def served(self, name: str) -> list[ModelVersion]:
        """Every served version of the model; ModelNotReadyError with the reason if none."""
        entry = self.entry(name)
        if not entry.versions:
            raise ModelNotReadyError(_not_ready(entry))
        return list(entry.versions.values())

    def config(self, name: str) -> ModelConfig:
        """The model's config, also while it has no ready version (if it could be read)."""
        entry = self.entry(name)
        if entry.config is None:
            raise ModelNotReadyError(_not_ready(entry))
        return entry.config

    def snapshot(
        self, footprints: Mapping[str, Mapping[int, int]] = MappingProxyType({})
    ) -> tuple[ModelSnapshot, ...]:
        """Every model with its state and served versions, for observers (metrics);
        ``footprints``: each model's measured bytes per version, where the lifecycle has them."""
        return tuple(
            ModelSnapshot(
                entry.name,
                entry.state.value,
                entry.reason,
                tuple(
                    _version_snapshot(entry, number, footprints.get(entry.name, {}))
                    for number in sorted(entry.versions)
                ),
            )
            for entry in self.entries()
        )

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index: one row per served or failed version, one per model
        without any; each with its state and the reason for it."""
        rows: list[dict[str, Any]] = []
        for entry in self.entries():
            versions: dict[int, tuple[str, str]] = {
                v: (ModelState.UNAVAILABLE.value, reason)
                for v, reason in entry.status.failed.items()
            }
            served = self._serving_state(entry)
            for v in entry.versions:
                versions[v] = served
            if not versions:
                versions[-1] = (entry.state.value, entry.reason)
            for v in sorted(versions):
                state, reason = versions[v]
                if ready_only and state != ModelState.READY.value:
                    continue
                rows.append(
                    {
                        "name": entry.name,
                        "version": "" if v < 0 else str(v),
                        "state": state,
                        "reason": reason,
                    }
                )
        return rows


def scheduling_policy(config: ModelConfig) -> ModelPolicy:
    """How the model takes part in cross-model scheduling, from its config."""
    resources: dict[str, int] = {}
    priority = 0
    for group in config.instance_group:
        if group.rate_limiter is not None:
            priority = max(priority, group.rate_limiter.priority)
            for resource in group.rate_limiter.resources:
                resources[resource.name] = max(resources.get(resource.name, 0), resource.count)
    return ModelPolicy(
        weight=config.scheduling.weight,
        slo_p99_ms=config.scheduling.slo_p99_ms,
        resources=resources,
        resource_priority=priority,
    )


def _version_snapshot(
    entry: ModelEntry, number: int, footprints: Mapping[int, int]
) -> VersionSnapshot:
    version = entry.versions[number]
    return VersionSnapshot(
        version.version_str,
        version.stats,
        version.queue.pending_requests,
        len(version.instances),
        version.in_flight,
        footprints.get(number),
        version.instances[0].backend.engine_stats() if version.instances else None,
    )


def _listing(entry: ModelEntry) -> str:
    return ", ".join(map(str, sorted(entry.versions))) or "none"


def _not_ready(entry: ModelEntry) -> str:
    reason = f": {entry.reason}" if entry.reason else ""
    return f"model '{entry.name}' is {entry.state.value}{reason}"


def _pick(entry: ModelEntry, version: str) -> ModelVersion:
    """The served version of ``entry`` for ``version`` ("" = the default); Triton's words
    when there is none (its clients look for "Request for unknown model")."""
    name = entry.name
    if not version:
        served = entry.default
        if served is None:
            raise ModelNotReadyError(
                f"{UNKNOWN_MODEL}'{name}' has no available versions; {_not_ready(entry)}"
            )
        return served
    found = entry.versions.get(int(version)) if version.isdigit() else None
    if found is None:
        if not entry.versions:
            raise ModelNotReadyError(
                f"{UNKNOWN_MODEL}'{name}' version {version} is not at ready state; "
                f"{_not_ready(entry)}"
            )
        raise ModelNotFoundError(
            f"{UNKNOWN_MODEL}'{name}' version {version} is not found; served versions: "
            f"{_listing(entry)}"
        )
    return found


def _steps(config: ModelConfig) -> tuple[Step, ...]:
    """The models an ensemble's or a cascade's config calls; () for other models. A cascade
    sends its light model whole batches and its heavy model part of one: each must take as
    many rows as the cascade's max_batch_size."""
    scheduling = config.ensemble_scheduling
    if scheduling is not None:
        return tuple(
            Step(f"step {i} '{s.model_name}'", s.model_name, _version(s.model_version), 0)
            for i, s in enumerate(scheduling.step, 1)
        )
    cascade = config.cascade
    if cascade is not None:
        rows = config.max_batch_size
        return (
            Step(
                f"light model '{cascade.light_model}'",
                cascade.light_model,
                _version(cascade.light_model_version),
                rows,
            ),
            Step(
                f"heavy model '{cascade.heavy_model}'",
                cascade.heavy_model,
                _version(cascade.heavy_model_version),
                rows,
            ),
        )
    return ()


def _version(number: int) -> str:
    """A step's version as routing takes it: "" for the default (a negative number)."""
    return "" if number < 0 else str(number)
