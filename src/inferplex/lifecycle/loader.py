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
import dataclasses
import logging
import time
from pathlib import Path

from inferplex.backends import Backend
from inferplex.backends.base import InstanceSpec, ModelCaller
from inferplex.config.model_config import ModelConfig
from inferplex.config.paths import check_model_name
from inferplex.config.server_config import DEFAULT_MAX_MODEL_INSTANCES
from inferplex.core.cache import ResponseCache
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.instance import ModelInstance
from inferplex.core.model import ModelVersion
from inferplex.core.registry import ModelEntry, ModelRegistry, ModelState, scheduling_policy
from inferplex.errors import (
    InferplexError,
    InsufficientMemoryError,
    InvalidInputError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    load_failed,
    unknown_model,
)
from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.file_override import OverrideFolders, remove_folder
from inferplex.lifecycle.gpu_memory import GpuMemory
from inferplex.lifecycle.memory import release_free_memory, rss_bytes
from inferplex.lifecycle.pacing import UNPACED, Pacer
from inferplex.lifecycle.planning import ModelPlan, check_instance_count
from inferplex.lifecycle.reading import Facts, Read, ReadAhead, Warmup, read_many, read_model
from inferplex.lifecycle.room import MemoryBudgets
from inferplex.lifecycle.warmup import run_warmup
from inferplex.repository.local import list_files
from inferplex.types import InferenceRequest

logger = logging.getLogger(__name__)


class ModelLoader:
    """Changes what the registry serves. Every method runs on the event loop; file reads,
    instance creation and freeing run in threads."""

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
        #: --memory-limit, --process-memory-limit, --gpu-memory-limit (room.py)
        self.budgets = MemoryBudgets(
            registry,
            self._background,
            self.unload_locked,
            memory_limit,
            process_memory_limit,
            gpu_memory,
        )
        self.gpu = self.budgets.gpu
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
        self._dispatcher = dispatcher
        self._cache = cache
        self._caller = caller

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
        entry = self.registry.add(name)
        async with entry.lock:
            if pinned is not None:
                entry.pinned = pinned
            async with self._load_lock:
                replaced = await self._load(entry, model_dir, override, pacer, ahead)
            stale = self.overrides.adopt(name, source)
            # the replaced versions drain without holding up the loads of other models
            await self._retire(replaced, pacer)
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
        entry: ModelEntry,
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
                        self.repository / entry.name,
                        self._intra_op_threads,
                        override,
                        self._auto_complete,
                        self._max_instances,
                    )
                )
            entry.fingerprint, read = ahead
            if isinstance(read, Exception):
                raise read
        except Exception as exc:
            raise self._failed(entry, first, _describe(exc)) from None
        return read

    async def _load_versions(
        self,
        entry: ModelEntry,
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
                    entry, plan, version, warmup, pacer
                )
                footprints[version] = max(measured, facts[version][1])
            except Exception as exc:
                await self._retire(list(loaded.values()))
                reason = f"version {version}: {_describe(exc)}"
                entry.failed = {version: reason}
                raise self._failed(entry, first, reason) from None
        return loaded, footprints

    async def _load(
        self,
        entry: ModelEntry,
        model_dir: Path,
        override: ModelConfig | None,
        pacer: Pacer,
        ahead: ReadAhead | None,
    ) -> list[ModelVersion]:
        """Load what changed and switch to it; returns the versions no longer served."""
        first = not entry.versions
        entry.failed, entry.load_failed = {}, False
        if first:
            entry.state, entry.reason = ModelState.LOADING, ""
            logger.info("model '%s' LOADING", entry.name, extra=_state(entry))
        if ahead is None and self.budgets.process_memory_limit:
            await self._room_to_read(entry, model_dir, first)
        plan, facts, warmup = await self._read_model(
            entry, model_dir, override, pacer, first, ahead
        )
        if first:
            entry.config = plan.config
        if plan.config.response_cache.enable and self._cache is None:
            logger.warning(
                "model '%s' has response_cache { enable: true } but the server has no response "
                "cache (--cache-size is 0): nothing of it is cached; set --cache-size BYTES",
                entry.name,
            )
        keep = _unchanged(entry, plan, facts)
        to_load = sorted(set(plan.version_files) - set(keep))
        if not to_load and set(keep) == set(entry.versions):
            entry.state, entry.reason = ModelState.READY, ""
            return []
        estimate = _estimate(entry, to_load, facts)
        sizes = {v: facts[v][1] for v in to_load}
        gpu_estimate = self.gpu.estimate(
            entry.name, to_load, sizes, _specs(plan, entry.instance_count)
        )
        try:
            # while a session is built, the file's bytes are held beside the runtime's copy
            # of them: a load peaks about its files' size above its footprint (lifecycle.md)
            await self.budgets.make_room(entry, estimate, gpu_estimate, sum(sizes.values()))
        except InsufficientMemoryError as exc:
            self._failed(entry, first, exc.message)
            raise
        entry.generation += 1
        loaded, footprints = await self._load_versions(
            entry, plan, to_load, facts, warmup, pacer, first
        )
        served = {**keep, **loaded}
        replaced = [s for v, s in entry.versions.items() if served.get(v) is not s]
        entry.config, entry.plan = plan.config, plan
        entry.version_fingerprints = {v: facts[v][0] for v in served}
        entry.footprints = {v: entry.footprints[v] for v in keep} | footprints
        entry.measured |= {v: (facts[v][0], n) for v, n in footprints.items()}
        if first:
            entry.last_used = time.monotonic()
        self.registry.publish(entry, served)  # the switch: new requests go to ``served``
        self.gpu.publish(entry.name, served, loaded)
        entry.state, entry.reason = ModelState.READY, ""
        logger.info(
            "model '%s' READY (versions %s; loaded %s, %d bytes)",
            entry.name,
            ", ".join(map(str, sorted(served))),
            ", ".join(map(str, to_load)),
            sum(footprints.values()),
            extra=_state(entry),
        )
        try:
            # the measured footprint may be above the estimate
            await self.budgets.make_room(entry, 0, after_load=True)
        except InsufficientMemoryError as exc:
            if not first:  # the old versions are gone already: the new ones go on serving
                logger.warning("model '%s': %s", entry.name, exc.message)
                return replaced
            # a first load must not leave the server over its limit: it is refused after all
            # (its measured footprint is kept, so the next try is estimated at it)
            reason = f"{exc.message}; unloaded again"
            await self.unload_locked(entry, reason)
            self._failed(entry, first, reason)
            raise InsufficientMemoryError(reason) from None
        return replaced

    async def _load_version(
        self,
        entry: ModelEntry,
        plan: ModelPlan,
        version: int,
        warmup: list[InferenceRequest],
        pacer: Pacer,
    ) -> tuple[ModelVersion, int]:
        """Create the instances of one version, register it and warm it up (not served yet);
        returns it with the growth of the process's RSS meanwhile."""
        dispatcher = self._dispatcher
        assert dispatcher is not None, "attach() comes first"
        path = plan.version_files[version]
        specs = _specs(plan, entry.instance_count)
        gpu_before = self.gpu.before(specs)
        # at the server's priority: the intra-op threads made here inherit it (background.py).
        # One trip to a thread: beside busy serving, each trip costs the event loop a forced
        # GIL hand-over (bench/lifecycle.py, docs/lifecycle.md)
        before, backends, after = await pacer.step(
            lambda: asyncio.to_thread(_create_measured, plan, path, specs, self._caller)
        )
        key = f"{entry.name}/{version}"
        if entry.generation > 1:
            key += f"@{entry.generation}"
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
        old = entry.versions.get(version)
        if old is not None:
            served.stats = old.stats  # the counters of a version go on across a reload
        dispatcher.add(served.queueing, scheduling_policy(plan.config))
        try:
            await pacer.step(lambda: run_warmup(served, warmup))
        except BaseException:
            await self._retire([served])
            raise
        self.gpu.measured(entry.name, version, gpu_before)
        if warmup:  # its first runs allocate too
            after = await self._background.run(rss_bytes)
        return served, after - before

    def _failed(self, entry: ModelEntry, first: bool, reason: str) -> ModelLoadError:
        if first:
            entry.state, entry.reason = ModelState.UNAVAILABLE, reason
            entry.load_failed = True
            logger.error("model '%s' failed to load: %s", entry.name, reason, extra=_state(entry))
        else:
            entry.reason = f"reload failed, the previous version(s) go on serving: {reason}"
            logger.error("model '%s': %s", entry.name, entry.reason)
        return load_failed(entry.name, reason)

    # -- memory -------------------------------------------------------------------------------
    async def _room_to_read(self, entry: ModelEntry, model_dir: Path, first: bool) -> None:
        """Room under the process limit for reading the model: completing its config from
        the model's signature builds a session that holds about twice the files' size
        while it lives (docs/lifecycle.md)."""
        size = sum(f.size for f in await self._background.run(list_files, model_dir))
        try:
            await self.budgets.make_room(entry, 0, transient=2 * size)
        except InsufficientMemoryError as exc:
            self._failed(entry, first, exc.message)
            raise

    # -- unload -------------------------------------------------------------------------------
    async def unload(self, name: str, reason: str = "unloaded", forget: bool = False) -> None:
        """Stop serving ``name``: in-flight requests finish, then its memory is freed.
        ``forget`` drops it from the index too (it left the repository)."""
        entry = self.registry.get(name)
        if entry is None:
            raise unknown_model(name)
        async with entry.lock:
            await self.unload_locked(entry, reason)
        if forget:
            self.registry.forget(name)

    async def unload_locked(self, entry: ModelEntry, reason: str) -> None:
        """``unload`` for a caller that holds the entry's lock."""
        versions = list(entry.versions.values())
        if versions:
            entry.state, entry.reason = ModelState.UNLOADING, ""
            logger.info("model '%s' UNLOADING (%s)", entry.name, reason, extra=_state(entry))
            self.registry.publish(entry, {})  # nothing new reaches the model from here on
            before = await self._background.run(rss_bytes)
            await self._retire(versions)
            logger.info(
                "model '%s' unloaded (%s): RSS %d -> %d bytes",
                entry.name,
                reason,
                before,
                await self._background.run(rss_bytes),
            )
        entry.state, entry.reason = ModelState.UNAVAILABLE, reason
        entry.footprints, entry.failed, entry.load_failed = {}, {}, False
        self.gpu.release(entry.name)
        await self.overrides.release(entry.name)

    async def unload_all(self, timeout: float | None = None) -> None:
        """Shutdown: every model drains (up to ``timeout``), then everything is freed.
        Composite models (pipelines, cascades) drain first: their requests in flight still
        call the models they are made of."""
        entries = [e for e in self.registry.entries() if e.versions]
        served = {e.name: list(e.versions.values()) for e in entries}  # publish() empties them
        for composite in (True, False):
            stage = [e for e in entries if any(v.composite for v in served[e.name]) is composite]
            for entry in stage:
                entry.state = ModelState.UNLOADING
                logger.info("model '%s' UNLOADING (shutdown)", entry.name, extra=_state(entry))
                self.registry.publish(entry, {})
            draining = [v.drain(timeout) for e in stage for v in served[e.name]]
            await asyncio.gather(*draining, return_exceptions=True)
        await self._free([v for versions in served.values() for v in versions])
        for entry in entries:
            entry.state, entry.reason, entry.footprints = ModelState.UNAVAILABLE, "unloaded", {}
            self.gpu.release(entry.name)
            await self.overrides.release(entry.name)
            logger.info("model '%s' UNAVAILABLE (unloaded)", entry.name, extra=_state(entry))
        self._background.close()

    async def _retire(self, versions: list[ModelVersion], pacer: Pacer = UNPACED) -> None:
        """Drain ``versions`` (no longer served), then free them."""
        if versions:
            await asyncio.gather(*(v.drain() for v in versions))
            await self._free(versions, pacer)

    async def _free(self, versions: list[ModelVersion], pacer: Pacer = UNPACED) -> None:
        if self._dispatcher is not None:
            for version in versions:
                self._dispatcher.remove(version.queueing)
        # shielded: a load cancelled while its freeing waits still frees what it replaced
        await asyncio.shield(pacer.step(lambda: self._background.run(_close_versions, versions)))

    # -- runtime management -------------------------------------------------------------------
    async def set_instance_count(self, name: str, count: int) -> None:
        """Run ``count`` instances of every served version of ``name``, without a reload:
        new instances join when created, surplus ones leave when their batch ends."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidInputError(
                f"instance 'count' must be an integer from 1 to {self._max_instances}, got "
                f"{count!r}"
            )
        check_instance_count(name, count, self._max_instances)
        entry = self.registry.entry(name)
        async with entry.lock:
            plan = entry.plan
            if not entry.versions or plan is None:
                raise ModelNotReadyError(f"model '{name}' is {entry.state.value}: not loaded")
            if plan.config.sequence_batching is not None:
                raise InvalidInputError(
                    f"model '{name}' is a sequence model: its sequences keep to their "
                    "instances, so its instance count changes only with a reload "
                    "(instance_group count)"
                )
            for version, served in entry.versions.items():
                have = len(served.instances)
                if count > have:
                    specs = _specs(plan, count)[have:]
                    path = plan.version_files[version]
                    backends = await asyncio.to_thread(
                        _create_backends, plan, path, specs, self._caller
                    )
                    served.add_instances(backends)
                elif count < have:
                    retired = await served.retire_instances(have - count)
                    await self._background.run(_close_instances, retired)
            entry.instance_count = count
        logger.info("model '%s' runs %d instance(s) per version", name, count)


def _specs(plan: ModelPlan, count: int | None) -> list[InstanceSpec]:
    """The config's instances, or ``count`` of them (extra ones like the last)."""
    specs = list(plan.instances)
    if count is None:
        return specs
    return (specs + [specs[-1]] * count)[:count]


def _create_measured(
    plan: ModelPlan, path: Path, specs: list[InstanceSpec], caller: ModelCaller | None
) -> tuple[int, list[Backend], int]:
    """The instances, with the process's RSS (worker processes included: /proc reading)
    right before and after they were made."""
    before = rss_bytes()
    backends = _create_backends(plan, path, specs, caller)
    return before, backends, rss_bytes()


def _create_backends(
    plan: ModelPlan, path: Path, specs: list[InstanceSpec], caller: ModelCaller | None
) -> list[Backend]:
    backends: list[Backend] = []
    try:
        for spec in specs:
            backends.append(
                plan.backend(path, plan.config, dataclasses.replace(spec, caller=caller))
            )
    except BaseException:
        for backend in backends:
            backend.close()
        raise
    return backends


def _close_versions(versions: list[ModelVersion]) -> None:
    for version in versions:
        version.close()
    release_free_memory()


def _close_instances(instances: list[ModelInstance]) -> None:
    for instance in instances:
        instance.close()
    release_free_memory()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InferplexError):
        return exc.message
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0] if len(text) > 500 else text


def _state(entry: ModelEntry) -> dict[str, str]:
    """The structured fields of a state-change log line (JSON logs show them)."""
    return {"model": entry.name, "state": entry.state.value}


def _estimate(entry: ModelEntry, versions: list[int], facts: Facts) -> int:
    """Bytes that loading ``versions`` will take: each one's last measured footprint while
    its files are those it was measured with (also after an unload or eviction), else its
    files' size."""
    total = 0
    for version in versions:
        fingerprint, size = facts[version]
        last = entry.measured.get(version)
        total += last[1] if last is not None and last[0] == fingerprint else size
    return total


def _unchanged(entry: ModelEntry, plan: ModelPlan, facts: Facts) -> dict[int, ModelVersion]:
    """The served versions a reload keeps: same config and backend, same files. A new
    config sets the instance count again."""
    same = (
        entry.plan is not None
        and entry.config == plan.config
        and entry.plan.backend is plan.backend
    )
    if not same:
        entry.instance_count = None
        return {}
    return {
        v: served
        for v, served in entry.versions.items()
        if v in facts and entry.version_fingerprints.get(v) == facts[v][0]
    }
