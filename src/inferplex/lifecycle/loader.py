"""ModelLoader: loads, reloads and unloads the models of a local repository into the registry.

A (re)load reads the model's config and files, loads every version that is new or changed
*beside* the served ones, warms them up, then switches traffic in one step
(``ModelRegistry.publish``); the replaced versions finish their in-flight requests and are
freed afterwards. If anything fails, the versions already serving keep serving and the
reason is kept for the index. Loads run one at a time, so each footprint is measured
without another load growing the process at the same moment, and the memory budget is
checked (evicting idle models, least recently used first) before a load starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from inferplex.backends.base import ModelCaller
from inferplex.config.model_config import ModelConfig
from inferplex.config.paths import check_model_name
from inferplex.config.server_config import DEFAULT_MAX_MODEL_INSTANCES
from inferplex.core.cache import ResponseCache
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import NO_FAILURES, ModelRegistry, ModelState, scheduling_policy
from inferplex.errors import (
    InferplexError,
    InsufficientMemoryError,
    ModelLoadError,
    ModelNotFoundError,
    load_failed,
)
from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.file_override import OverrideFolders, remove_folder
from inferplex.lifecycle.gpu_memory import GpuMemory
from inferplex.lifecycle.instances import Retirer, create_measured, instance_specs
from inferplex.lifecycle.memory import rss_bytes
from inferplex.lifecycle.pacing import UNPACED, Pacer
from inferplex.lifecycle.planning import ModelPlan
from inferplex.lifecycle.reading import Facts, Read, ReadAhead, Warmup, read_many, read_model
from inferplex.lifecycle.records import ModelRecord, ModelRecords
from inferplex.lifecycle.room import MemoryBudgets
from inferplex.lifecycle.scaling import InstanceScaler
from inferplex.lifecycle.unloading import Unloader
from inferplex.lifecycle.warmup import run_warmup
from inferplex.repository.local import list_files

logger = logging.getLogger(__name__)


class ModelLoader:
    """Changes what the registry serves. Every method runs on the event loop; file reads,
    instance creation and freeing run in threads. A model's state changes only through
    its record's transitions (records.py)."""

    def __init__(
        self,
        registry: ModelRegistry,
        repository: Path,
        intra_op_threads: int = 0,
        memory_limit: int = 0,
        gpu_memory: GpuMemory | None = None,
        load_nice: int = 0,
        load_share: float = 1.0,
        auto_complete: bool = True,
        sequence_backlog: int = 1024,
        process_memory_limit: int = 0,
        max_instances: int = DEFAULT_MAX_MODEL_INSTANCES,
    ) -> None:
        self.registry = registry
        #: what the lifecycle keeps of each model, and its state changes
        self.records = ModelRecords(registry)
        self.repository = repository
        #: temporary folders of models loaded from a load request's file overrides
        self.overrides = OverrideFolders()
        self._intra_op_threads = intra_op_threads
        #: configs completed from the model (ServerConfig.auto_complete_config)
        self._auto_complete = auto_complete
        #: instances of one version at most, however the count is set (--max-model-instances)
        self._max_instances = max_instances
        #: sequences of a stateful model that may wait for a slot (--max-sequence-backlog)
        self._sequence_backlog = sequence_backlog
        #: reading, planning and freeing models yield the cores to serving (background.py)
        self._background = BackgroundWork(load_nice)
        self._retirer = Retirer(self._background)
        gpu = gpu_memory or GpuMemory({})
        self.unloader = Unloader(self.records, self._retirer, gpu, self.overrides)
        #: --memory-limit, --process-memory-limit, --gpu-memory-limit (room.py)
        self.budgets = MemoryBudgets(
            self.records,
            self._background,
            self.unloader.unload_locked,
            memory_limit,
            process_memory_limit,
            gpu,
        )
        self.gpu = gpu
        #: instance counts changed at run time (scaling.py)
        self.scaler = InstanceScaler(self.records, self._background, max_instances)
        #: the share of the time a load's steps take while requests are served (pacing.py)
        self._load_share = load_share
        self._load_lock = asyncio.Lock()
        self._dispatcher: Dispatcher | None = None
        self._cache: ResponseCache | None = None
        self._caller: ModelCaller | None = None

    def attach(
        self, dispatcher: Dispatcher, cache: ResponseCache | None, caller: ModelCaller | None
    ) -> None:
        """What loaded versions run on: the dispatcher, the shared response cache and the
        caller through which backends reach other served models."""
        self._dispatcher = self._retirer.dispatcher = dispatcher
        self._cache = cache
        self._caller = self.scaler.caller = caller

    # -- load ---------------------------------------------------------------------------------
    def model_dir(self, name: str) -> Path:
        """The folder of ``name`` in the repository: InvalidInputError for a name no folder
        can have (config/paths.py), ModelNotFoundError for a hidden folder's."""
        check_model_name(name)
        if name.startswith((".", "_")):  # skipped by repository scans, as hidden folders
            raise ModelNotFoundError(f"'{name}' is not a valid model name")
        return self.repository / name

    async def load(
        self,
        name: str,
        override: ModelConfig | None = None,
        pinned: bool | None = None,
        source: Path | None = None,
        paced: bool = True,
        ahead: ReadAhead | None = None,
    ) -> None:
        """Load ``name`` from the repository, or reload it if it is loaded (only new or
        changed versions load; unchanged ones keep serving). ModelLoadError with the reason
        when it fails (the versions serving before go on serving). ``source``: an override
        folder (file_override.py) to load from instead of the repository. ``paced``: the load
        yields to busy serving (pacing.py); not for a load that requests wait for.
        ``ahead``: the model's files as :meth:`read_ahead` read them."""
        model_dir = source or self.model_dir(name)
        if source is None and ahead is None and not await asyncio.to_thread(model_dir.is_dir):
            raise ModelNotFoundError(  # Triton's words first, then which repository
                f"failed to load '{name}', failed to poll from model repository: '{name}' is "
                f"not in the model repository {self.repository}"
            )
        pacer = Pacer(self._load_share, self._serving) if paced else UNPACED
        record = self.records.add(name)
        async with record.lock:
            if pinned is not None:
                record.pinned = pinned
            async with self._load_lock:
                try:
                    replaced = await self._load(record, model_dir, override, pacer, ahead)
                except BaseException as exc:
                    if record.state is ModelState.LOADING:  # a first load that did not end
                        cancelled = isinstance(exc, asyncio.CancelledError)
                        why = "the load was cancelled" if cancelled else _describe(exc)
                        self._failed(record, True, why)
                    raise
            stale = self.overrides.adopt(name, source)
            # the replaced versions drain without holding up the loads of other models
            await self._retirer.retire(replaced, pacer)
            if stale is not None:  # the override folder the replaced versions came from
                await asyncio.to_thread(remove_folder, stale)

    async def read_ahead(self, names: list[str]) -> dict[str, ReadAhead]:
        """What loads of ``names`` from the repository read, in one trip to a thread for all:
        at start, one trip per model would cost more than the reading of a small model's
        config (a thread hand-off each way). Names that are no model folder are left out
        (their load says why)."""
        return await self._background.run(
            read_many,
            self.repository,
            names,
            self._intra_op_threads,
            self._auto_complete,
            self._max_instances,
        )

    def _serving(self) -> bool:
        """Whether requests are being served (a paced load yields to them)."""
        return self._dispatcher is not None and self._dispatcher.busy()

    async def _read_model(
        self,
        record: ModelRecord,
        model_dir: Path,
        override: ModelConfig | None,
        pacer: Pacer,
        first: bool,
        ahead: ReadAhead | None,
    ) -> Read:
        """The model's plan, each version's facts and its warm-up, read off the loop (or
        ``ahead``); a model that cannot be read is marked failed."""
        try:
            # a model that failed is tried again when its files change; poll mode compares
            # the repository's folder, also for a model loaded from file overrides
            if ahead is None:
                ahead = await pacer.step(
                    lambda: self._background.run(
                        read_model,
                        model_dir,
                        self.repository / record.name,
                        self._intra_op_threads,
                        override,
                        self._auto_complete,
                        self._max_instances,
                    )
                )
            record.fingerprint, read = ahead
            if isinstance(read, Exception):
                raise read
        except Exception as exc:
            raise self._failed(record, first, _describe(exc)) from None
        return read

    async def _load_versions(
        self,
        record: ModelRecord,
        plan: ModelPlan,
        to_load: list[int],
        facts: Facts,
        warmup: Warmup,
        pacer: Pacer,
        first: bool,
    ) -> tuple[dict[int, ModelVersion], dict[int, int]]:
        """Load ``to_load``, all or none: the loaded versions and their measured footprints
        (a failure retires those already loaded and marks the model failed)."""
        loaded: dict[int, ModelVersion] = {}
        footprints: dict[int, int] = {}
        for version in to_load:
            try:
                loaded[version], measured = await self._load_version(
                    record, plan, version, warmup, pacer
                )
                footprints[version] = max(measured, facts[version].size)
            except Exception as exc:
                await self._retirer.retire(list(loaded.values()))
                reason = f"version {version}: {_describe(exc)}"
                raise self._failed(record, first, reason, {version: reason}) from None
        return loaded, footprints

    async def _load(
        self,
        record: ModelRecord,
        model_dir: Path,
        override: ModelConfig | None,
        pacer: Pacer,
        ahead: ReadAhead | None,
    ) -> list[ModelVersion]:
        """Load what changed and switch to it; returns the versions no longer served."""
        entry = record.entry
        first = not entry.versions
        if first:
            self.records.transition(record, ModelState.LOADING)
        if ahead is None and self.budgets.process_memory_limit:
            await self._room_to_read(record, model_dir, first)
        plan, facts, warmup = await self._read_model(
            record, model_dir, override, pacer, first, ahead
        )
        if first:  # its config answers while it loads
            self.registry.publish(entry, entry.status, config=plan.config)
        if plan.config.response_cache.enable and self._cache is None:
            logger.warning(
                "model '%s' has response_cache { enable: true } but the server has no response "
                "cache (--cache-size is 0): nothing of it is cached; set --cache-size BYTES",
                record.name,
            )
        keep = record.unchanged(plan, facts)
        to_load = sorted(set(plan.version_files) - set(keep))
        if not to_load and set(keep) == set(entry.versions):
            self.records.transition(record, ModelState.READY)
            return []
        sizes = {v: facts[v].size for v in to_load}
        gpu_estimate = self.gpu.estimate(
            record.name, to_load, sizes, instance_specs(plan, record.instance_count)
        )
        try:
            # while a session is built, the file's bytes are held beside the runtime's copy
            # of them: a load peaks about its files' size above its footprint (lifecycle.md)
            await self.budgets.make_room(
                record, record.estimate(to_load, facts), gpu_estimate, sum(sizes.values())
            )
        except InsufficientMemoryError as exc:
            self._failed(record, first, exc.message)
            raise
        record.generation += 1
        loaded, footprints = await self._load_versions(
            record, plan, to_load, facts, warmup, pacer, first
        )
        served = {**keep, **loaded}
        replaced = [s for v, s in entry.versions.items() if served.get(v) is not s]
        record.keep(plan, facts, list(keep), footprints)
        # the switch: new requests go to ``served``
        self.records.transition(
            record,
            ModelState.READY,
            versions=served,
            detail=f"versions {', '.join(map(str, sorted(served)))}; loaded "
            f"{', '.join(map(str, to_load))}, {sum(footprints.values())} bytes",
        )
        self.gpu.publish(record.name, served, loaded)
        try:
            # the measured footprint may be above the estimate
            await self.budgets.make_room(record, 0, after_load=True)
        except InsufficientMemoryError as exc:
            if not first:  # the old versions are gone already: the new ones go on serving
                logger.warning("model '%s': %s", record.name, exc.message)
                return replaced
            # a first load must not leave the server over its limit: it is refused after all
            # (its measured footprint is kept, so the next try is estimated at it)
            reason = f"{exc.message}; unloaded again"
            await self.unloader.unload_locked(record, reason)
            self._failed(record, first, reason)
            raise InsufficientMemoryError(reason) from None
        return replaced

    async def _load_version(
        self,
        record: ModelRecord,
        plan: ModelPlan,
        version: int,
        warmup: Warmup,
        pacer: Pacer,
    ) -> tuple[ModelVersion, int]:
        """Create the instances of one version, register it and warm it up (not served yet);
        returns it with the growth of the process's RSS meanwhile."""
        dispatcher = self._dispatcher
        assert dispatcher is not None, "attach() comes first"
        path = plan.version_files[version]
        specs = instance_specs(plan, record.instance_count)
        gpu_before = self.gpu.before(specs)
        # at the server's priority: the intra-op threads made here inherit it (background.py).
        # One trip to a thread: beside busy serving, each trip costs the event loop a forced
        # GIL hand-over (bench/lifecycle.py, docs/lifecycle.md)
        before, backends, after = await pacer.step(
            lambda: asyncio.to_thread(create_measured, plan, path, specs, self._caller)
        )
        key = f"{record.name}/{version}"
        if record.generation > 1:
            key += f"@{record.generation}"
        loop = asyncio.get_running_loop()
        served = ModelVersion(
            plan.config,
            version,
            backends,
            loop,
            dispatcher,
            self._cache,
            key,
            sequence_backlog=self._sequence_backlog,
            initial_states=plan.initial_states,
        )
        old = record.entry.versions.get(version)
        if old is not None:
            served.stats = old.stats  # the counters of a version go on across a reload
        dispatcher.add(served.queueing, scheduling_policy(plan.config))
        try:
            await pacer.step(lambda: run_warmup(served, warmup))
        except BaseException:
            await self._retirer.retire([served])
            raise
        self.gpu.measured(record.name, version, gpu_before)
        if warmup:  # its first runs allocate too
            after = await self._background.run(rss_bytes)
        return served, after - before

    def _failed(
        self,
        record: ModelRecord,
        first: bool,
        reason: str,
        failed: Mapping[int, str] = NO_FAILURES,
    ) -> ModelLoadError:
        """Mark the load failed (``failed``: the versions that did, with why): a first load
        leaves the model UNAVAILABLE, a reload leaves the versions serving as they were."""
        if first:
            self.records.transition(
                record, ModelState.UNAVAILABLE, reason, failed=failed, error=True
            )
        else:
            self.records.transition(
                record,
                ModelState.READY,
                f"reload failed, the previous version(s) go on serving: {reason}",
                failed=failed,
                error=True,
            )
        return load_failed(record.name, reason)

    # -- memory -------------------------------------------------------------------------------
    async def _room_to_read(self, record: ModelRecord, model_dir: Path, first: bool) -> None:
        """Room under the process limit for reading the model: completing its config from
        the model's signature builds a session that holds about twice the files' size
        while it lives (docs/lifecycle.md)."""
        size = sum(f.size for f in await self._background.run(list_files, model_dir))
        try:
            await self.budgets.make_room(record, 0, transient=2 * size)
        except InsufficientMemoryError as exc:
            self._failed(record, first, exc.message)
            raise


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InferplexError):
        return exc.message
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 500 else text
