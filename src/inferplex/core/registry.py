"""ModelRegistry: the models known to the server, their versions, states and routing."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path

from inferplex.backends import Backend
from inferplex.backends.base import ModelCaller
from inferplex.config.model_config import ModelConfig
from inferplex.core.cache import ResponseCache
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.scheduler import ModelPolicy
from inferplex.errors import InferplexError, ModelNotFoundError, ModelNotReadyError
from inferplex.repository.local import ModelPlan, list_models, plan_model

logger = logging.getLogger(__name__)


class ModelState(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class ModelEntry:
    """One model name: its config (once read) and its loaded versions."""

    name: str
    state: ModelState = ModelState.LOADING
    reason: str = ""
    config: ModelConfig | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)


class ModelRegistry:
    def __init__(self, repository: Path, intra_op_threads: int = 0) -> None:
        self._repository = repository
        self._intra_op_threads = intra_op_threads
        self._entries: dict[str, ModelEntry] = {}
        self._dispatcher: Dispatcher | None = None
        self._cache: ResponseCache | None = None
        self._caller: ModelCaller | None = None

    # -- loading --------------------------------------------------------------------------
    async def load_all(
        self,
        dispatcher: Dispatcher,
        cache: ResponseCache | None = None,
        caller: ModelCaller | None = None,
    ) -> None:
        """Load every model of the repository; a model that fails is recorded, not raised.
        Loaded versions run their batches through ``dispatcher``; models that enable the
        response cache share ``cache``; backends reach other served models through ``caller``."""
        self._dispatcher = dispatcher
        self._cache = cache
        self._caller = caller
        model_dirs = await asyncio.to_thread(list_models, self._repository)
        for model_dir in model_dirs:
            self._entries[model_dir.name] = ModelEntry(model_dir.name)
        for model_dir in model_dirs:
            await self._load(self._entries[model_dir.name], model_dir)

    async def _load(self, entry: ModelEntry, model_dir: Path) -> None:
        loop = asyncio.get_running_loop()
        dispatcher = self._dispatcher
        assert dispatcher is not None, "load_all() sets the dispatcher"
        try:
            plan = await asyncio.to_thread(plan_model, model_dir, self._intra_op_threads)
            entry.config = plan.config
            policy = scheduling_policy(plan.config)
            if plan.config.response_cache.enable and self._cache is None:
                logger.warning(
                    "model '%s' enables response_cache but the server has no cache "
                    "(set --cache-size): answers are not cached",
                    entry.name,
                )
            for version, path in plan.version_files.items():
                backends = await asyncio.to_thread(_create_instances, plan, path, self._caller)
                served = ModelVersion(plan.config, version, backends, loop, dispatcher, self._cache)
                entry.versions[version] = served
                dispatcher.add(served, policy)
        except Exception as exc:
            entry.state = ModelState.UNAVAILABLE
            entry.reason = exc.message if isinstance(exc, InferplexError) else _describe(exc)
            logger.error("model '%s' failed to load: %s", entry.name, entry.reason)
            await self._close(list(entry.versions.values()))
            entry.versions.clear()
            return
        entry.state = ModelState.READY
        logger.info(
            "model '%s' READY (versions %s, %d instance(s) each)",
            entry.name,
            ", ".join(map(str, sorted(entry.versions))),
            len(plan.instances),
        )

    async def unload_all(self, timeout: float | None = None) -> None:
        """Drain every version (in-flight requests finish), then free the instances."""
        versions = [v for e in self._entries.values() for v in e.versions.values()]
        for entry in self._entries.values():
            if entry.state is ModelState.READY:
                entry.state = ModelState.UNLOADING
        await asyncio.gather(*(v.drain(timeout) for v in versions), return_exceptions=True)
        await self._close(versions)
        for entry in self._entries.values():
            entry.versions.clear()
            entry.state = ModelState.UNAVAILABLE
            entry.reason = "unloaded"

    async def _close(self, versions: list[ModelVersion]) -> None:
        for version in versions:
            if self._dispatcher is not None:
                self._dispatcher.remove(version)
        await asyncio.to_thread(_close_versions, versions)

    # -- lookups --------------------------------------------------------------------------
    def entry(self, name: str) -> ModelEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise ModelNotFoundError(f"unknown model '{name}'") from None

    def entries(self) -> list[ModelEntry]:
        return [self._entries[name] for name in sorted(self._entries)]

    def route(self, name: str, version: str = "") -> ModelVersion:
        """The version that serves a request: the given one, else the highest loaded one."""
        entry = self._entries.get(name)
        if entry is None:
            raise ModelNotFoundError(f"unknown model '{name}'")
        if entry.state is not ModelState.READY:
            raise ModelNotReadyError(_not_ready(entry))
        if not version:
            return entry.versions[max(entry.versions)]
        served = entry.versions.get(int(version)) if version.isdigit() else None
        if served is None:
            raise ModelNotFoundError(
                f"model '{name}' has no version '{version}', served versions: "
                f"{', '.join(map(str, sorted(entry.versions)))}"
            )
        return served

    def config(self, name: str) -> ModelConfig:
        """The model's config, also while it has no ready version (if it could be read)."""
        entry = self.entry(name)
        if entry.config is None:
            raise ModelNotReadyError(_not_ready(entry))
        return entry.config

    @property
    def all_ready(self) -> bool:
        return all(e.state is ModelState.READY for e in self._entries.values())


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


def _create_instances(plan: ModelPlan, path: Path, caller: ModelCaller | None) -> list[Backend]:
    backends: list[Backend] = []
    try:
        for spec in plan.instances:
            spec = dataclasses.replace(spec, caller=caller)
            backends.append(plan.backend(path, plan.config, spec))
    except BaseException:
        for backend in backends:
            backend.close()
        raise
    return backends


def _close_versions(versions: list[ModelVersion]) -> None:
    for version in versions:
        version.close()


def _not_ready(entry: ModelEntry) -> str:
    reason = f": {entry.reason}" if entry.reason else ""
    return f"model '{entry.name}' is {entry.state.value}{reason}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 500 else text
