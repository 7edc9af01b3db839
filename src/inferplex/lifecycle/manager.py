"""LifecycleManager: the model control modes and the management API on top of the loader.

- ``none``: every model loads at start; the load/unload API is refused (as in Triton).
- ``poll``: every model loads at start, then the repository is rescanned every
  ``repository_poll_secs``: new models load, changed ones reload, removed ones unload.
- ``explicit``: only ``load_model`` (``*`` = all) loads at start; then what the API asks.

Independent of the mode: ``load_on_demand`` loads a known model when a request needs it,
``idle_unload_secs`` unloads models nobody asked for that long (scale to zero), and
``memory_limit`` / ``gpu_memory_limit`` evict idle models when a load needs room.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

import orjson

from inferplex.backends.base import ModelCaller
from inferplex.config.model_config import ModelConfig
from inferplex.config.paths import check_model_name
from inferplex.config.readers import config_from_dict
from inferplex.config.server_config import ServerConfig
from inferplex.core.cache import ResponseCache
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import ModelRegistry
from inferplex.core.snapshot import TransitionCount
from inferplex.errors import (
    ConfigError,
    InferplexError,
    InvalidInputError,
    ModelControlDisabledError,
    ModelNotReadyError,
    PayloadTooLargeError,
    unknown_model,
)
from inferplex.lifecycle.file_override import FILE_PREFIX, is_file_parameter, override_files
from inferplex.lifecycle.gpu_memory import GpuMemory, open_probe
from inferplex.lifecycle.loader import ModelLoader
from inferplex.lifecycle.memory import rss_bytes
from inferplex.lifecycle.poller import RepositoryPoller, Snapshot, diff
from inferplex.lifecycle.records import ModelRecord
from inferplex.lifecycle.room import is_pinned
from inferplex.mesh.replica import owned_models
from inferplex.repository.local import list_models, scan_repository

logger = logging.getLogger(__name__)

#: load request parameters understood (Triton's ``config`` and ``file:<path>``; ours:
#: ``pinned``)
LOAD_PARAMETERS = ("config", f"{FILE_PREFIX}<version>/<file>", "pinned")
UNLOAD_PARAMETERS = ("unload_dependents",)
#: models whose files are read in one trip to a thread at start (their plans and warm-up
#: requests are held until each is loaded)
READ_AHEAD = 64


class LifecycleManager:
    """Decides what is loaded when; the engine delegates its management calls here."""

    def __init__(self, config: ServerConfig, registry: ModelRegistry) -> None:
        self.config = config
        self.registry = registry
        self.loader = ModelLoader(
            registry,
            config.model_repository,
            config.intra_op_threads,
            int(config.memory_limit),
            GpuMemory(config.gpu_memory_limit),
            config.load_nice,
            config.load_share,
            config.auto_complete_config,
            config.max_sequence_backlog,
            process_memory_limit=int(config.process_memory_limit),
            max_instances=config.max_model_instances,
        )
        self.records = self.loader.records
        self.poller: RepositoryPoller | None = None
        #: called (blocking, in a thread) before each repository scan: a remote repository
        #: syncs its local copy here
        self.before_scan: Callable[[], object] | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._on_demand: dict[str, asyncio.Task[None]] = {}

    # -- start and stop -----------------------------------------------------------------------
    async def start(
        self, dispatcher: Dispatcher, cache: ResponseCache | None, caller: ModelCaller | None
    ) -> None:
        """Load what the control mode says; start polling and idle unloading as configured.
        A model that fails to load is recorded in the index, not raised (unless
        ``exit_on_error``: then everything loaded is freed and ConfigError names the
        failures); a GPU memory limit for a GPU that is not there is (ConfigError)."""
        gpu = self.loader.gpu
        if gpu.limits:
            gpu.probe = await asyncio.to_thread(open_probe)
            await asyncio.to_thread(gpu.check_devices)
        self.loader.attach(dispatcher, cache, caller)
        config = self.config
        repository = self.loader.repository
        names = [p.name for p in await asyncio.to_thread(list_models, repository)]
        for name in names:
            self.records.add(name)
        wanted = names
        if config.model_control_mode == "explicit":
            wanted = names if "*" in config.load_model else list(config.load_model)
        elif config.load_model:
            logger.warning(
                "--load-model is for --model-control-mode explicit; in mode %s every model loads",
                config.model_control_mode,
            )
        # a mesh replica loads only what the ring gives it (docs/mesh.md)
        wanted = await asyncio.to_thread(owned_models, config, wanted)
        failed = await self._load_at_start(wanted)
        if failed and config.exit_on_error:
            await self.stop(0)  # free what did load: the start fails
            raise ConfigError(
                f"{len(failed)} model(s) failed to load at start (--exit-on-error): "
                + "; ".join(failed)
            )
        if config.model_control_mode == "poll":
            self.poller = RepositoryPoller(
                lambda: scan_repository(self.loader.repository),
                self.apply_snapshot,
                config.repository_poll_secs,
                self.before_scan,
            )
            self.poller.start()
        if config.idle_unload_secs > 0:
            self._idle_task = asyncio.get_running_loop().create_task(self._unload_idle())

    async def _load_at_start(self, names: list[str]) -> list[str]:
        """Load ``names``, their files read ahead in chunks; the failures, each as
        "'name': reason" (logged, not raised)."""
        failed: list[str] = []
        for start in range(0, len(names), READ_AHEAD):
            chunk = names[start : start + READ_AHEAD]
            ahead = await self.loader.read_ahead(chunk)
            for name in chunk:
                try:
                    await self.loader.load(name, ahead=ahead.pop(name, None))
                except InferplexError as exc:
                    logger.error("model '%s' not loaded at start: %s", name, exc.message)
                    failed.append(f"'{name}': {exc.message}")
        return failed

    async def stop(self, drain_timeout: float | None) -> None:
        """Stop the background work, then drain and free every model."""
        if self.poller is not None:
            await self.poller.stop()
        background = [*self._on_demand.values()]
        if self._idle_task is not None:
            background.append(self._idle_task)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self.loader.unloader.unload_all(drain_timeout)

    # -- poll mode ----------------------------------------------------------------------------
    async def apply_snapshot(self, on_disk: Snapshot) -> None:
        """Bring the served models in line with the repository as scanned."""
        # a model loaded from file overrides alone is not the repository's to remove
        overrides = self.loader.overrides
        known = {
            r.name: r.fingerprint
            for r in self.records.all()
            if r.name in on_disk or overrides.source(r.name) is None
        }
        changes = diff(on_disk, known)
        if changes:
            logger.info(
                "repository changed: added %s, changed %s, removed %s",
                list(changes.added),
                list(changes.changed),
                list(changes.removed),
            )
        for name in (*changes.added, *changes.changed):
            try:
                await self.loader.load(name)
            except InferplexError as exc:
                logger.error("poll: model '%s' not (re)loaded: %s", name, exc.message)
        for name in changes.removed:
            await self.loader.unloader.unload(name, "removed from the repository", forget=True)

    # -- the management API -------------------------------------------------------------------
    async def load(self, name: str, parameters: Mapping[str, Any]) -> None:
        """The repository API's load (Triton's): ``config`` (a JSON model configuration)
        replaces the config file for this load; ``file:<version>/<file>`` parameters replace
        the model's folder (file_override.py); ``pinned`` (bool) keeps it from eviction."""
        check_model_name(name)  # the door of HTTP, gRPC and the in-process API
        self._require_control("load", name)
        try:
            pinned, override, files = await self._load_parameters(name, parameters)
        except InferplexError as exc:  # Triton's words first: its clients look for them
            raise type(exc)(f"failed to load '{name}': {exc.message}") from None
        if not files:
            await self.loader.load(name, override, pinned)
            return
        assert override is not None  # _load_parameters: files come with a config
        self.loader.model_dir(name)  # the name must be a valid folder name before it is one
        source = await asyncio.to_thread(self.loader.overrides.write, name, files)
        logger.info("model '%s': loading from %d override file(s) in %s", name, len(files), source)
        try:
            await self.loader.load(name, override, pinned, source)
        finally:
            await self.loader.overrides.discard(name, source)

    async def unload(self, name: str, parameters: Mapping[str, Any]) -> None:
        """The repository API's unload; ``unload_dependents`` is accepted for Triton's clients
        (models that call this one get errors from it until it is loaded again)."""
        check_model_name(name)
        self._require_control("unload", name)
        for key in parameters:
            if key not in UNLOAD_PARAMETERS:
                raise InvalidInputError(
                    f"unknown unload parameter '{key}', expected one of: "
                    f"{', '.join(UNLOAD_PARAMETERS)}"
                )
        if parameters.get("unload_dependents"):
            logger.info(
                "unload '%s': unload_dependents is accepted and ignored; models that call it "
                "stay loaded",
                name,
            )
        await self.loader.unloader.unload(name)

    async def _load_parameters(
        self, name: str, parameters: Mapping[str, Any]
    ) -> tuple[bool | None, ModelConfig | None, dict[PurePosixPath, bytes]]:
        """A load request's ``pinned``, ``config`` and ``file:`` parameters, checked."""
        for key in parameters:
            if key not in LOAD_PARAMETERS and not is_file_parameter(key):
                raise InvalidInputError(
                    f"unknown load parameter '{key}', expected one of: {', '.join(LOAD_PARAMETERS)}"
                )
        pinned = parameters.get("pinned")
        if pinned is not None and not isinstance(pinned, bool):
            raise InvalidInputError(
                f"load parameter 'pinned' must be true or false, got {pinned!r}"
            )
        override = await self._config_override(name, parameters.get("config"))
        files = override_files(parameters)
        if files and override is None:
            raise InvalidInputError(
                f"load parameter 'config' is required with file overrides ('{FILE_PREFIX}"
                f"{next(iter(files))}'): the model loads from the given files only, and they "
                "need a model configuration"
            )
        return pinned, override, files

    async def _config_override(self, name: str, raw: Any) -> ModelConfig | None:
        """A load's ``config`` parameter read (in a worker thread when large: a config with
        thousands of entries takes long to check); one longer than --max-load-config-bytes
        is refused (it is a model configuration, not a model file)."""
        if not isinstance(raw, str | bytes) or len(raw) <= _INLINE_CONFIG_BYTES:
            return _config_override(name, raw)
        limit = self.config.max_load_config_bytes
        if len(raw) > limit:
            raise PayloadTooLargeError(
                f"load parameter 'config' of {len(raw)} bytes is above the limit of {limit} "
                "bytes (--max-load-config-bytes, INFERPLEX_MAX_LOAD_CONFIG_BYTES)"
            )
        return await asyncio.to_thread(_config_override, name, raw)

    def _require_control(self, action: str, name: str) -> None:
        if self.config.model_control_mode == "none":
            raise ModelControlDisabledError(
                f"cannot {action} model '{name}': model control is disabled; start the server "
                "with --model-control-mode explicit (or poll) to load and unload models "
                "through the API"
            )

    async def set_instance_count(self, name: str, count: Any) -> None:
        await self.loader.scaler.set_instance_count(name, count)

    def set_default_version(self, name: str, version: Any) -> None:
        if version is None:
            version = ""
        if not isinstance(version, str):
            raise InvalidInputError(
                f'\'version\' must be a string such as "2" (or "" for the highest), got {version!r}'
            )
        self.registry.set_default_version(name, version)
        logger.info("model '%s': unversioned requests go to version %s", name, version or "max")

    def memory(self) -> dict[str, Any]:
        """The budget, the process's RSS and every loaded model's footprint."""
        now = time.monotonic()
        models = [
            {
                "name": r.name,
                "bytes": r.footprint,
                "versions": {str(v): n for v, n in sorted(r.footprints.items())},
                "pinned": is_pinned(r),
                "in_flight": r.entry.in_flight,
                "idle_secs": round(now - r.entry.last_used, 3),
            }
            for r in self.records.all()
            if r.footprints
        ]
        return {
            "limit": self.loader.budgets.memory_limit,
            "process_limit": self.loader.budgets.process_memory_limit,
            "used": sum(m["bytes"] for m in models),
            "rss": rss_bytes(),
            "models": models,
            "gpus": self.loader.gpu.report(),
        }

    def footprints(self) -> dict[str, dict[int, int]]:
        """Each loaded model's measured bytes per version (for the metrics snapshot)."""
        return {r.name: r.footprints for r in self.records.all() if r.footprints}

    def transitions(self) -> tuple[TransitionCount, ...]:
        """The models' state changes so far, by (from, to) state."""
        return self.records.counts()

    # -- on demand and idle -------------------------------------------------------------------
    async def load_for_request(self, name: str, version: str) -> ModelVersion:
        """``load_on_demand``: load a known model a request needs, waiting a bounded time;
        then route the request. Loads for one model are shared by its waiting requests."""
        record = self.records.get(name)
        if record is None:
            model_dir = self.loader.model_dir(name)
            if not await asyncio.to_thread(model_dir.is_dir):
                raise unknown_model(name)
            record = self.records.add(name)
        if not record.entry.versions:
            task = self._on_demand.get(name)
            if task is None:
                # requests wait for this load: it is not paced (pacing.py)
                task = asyncio.get_running_loop().create_task(self.loader.load(name, paced=False))
                self._on_demand[name] = task
                task.add_done_callback(lambda t: self._loaded_on_demand(name, t))
            timeout = self.config.load_on_demand_timeout_secs
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # this request itself was cancelled
                raise ModelNotReadyError(  # the load was: the server is stopping
                    f"model '{name}' was not loaded: the server is shutting down"
                ) from None
            except TimeoutError:
                raise ModelNotReadyError(
                    f"model '{name}' is still loading after {timeout:g} s "
                    "(--load-on-demand-timeout-secs); try again later"
                ) from None
            except InferplexError as exc:
                raise ModelNotReadyError(
                    f"model '{name}' could not be loaded on demand: {exc.message}"
                ) from None
        return self.registry.route(name, version)

    def _loaded_on_demand(self, name: str, task: asyncio.Task[None]) -> None:
        self._on_demand.pop(name, None)
        if not task.cancelled():
            task.exception()  # retrieved here; each waiter got it already

    async def _unload_idle(self) -> None:
        limit = self.config.idle_unload_secs
        period = min(max(limit / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)  # the sweep period, not a wait for state
            now = time.monotonic()
            for record in self.records.all():
                if _idle(record, now, limit):
                    try:
                        await self.loader.unloader.unload(
                            record.name, f"unloaded after {limit:g} s idle"
                        )
                    except InferplexError as exc:
                        logger.warning("idle unload of '%s' failed: %s", record.name, exc)


def _idle(record: ModelRecord, now: float, limit: float) -> bool:
    entry = record.entry
    return (
        bool(entry.versions)
        and not entry.in_flight
        and not record.lock.locked()
        and not is_pinned(record)
        and now - entry.last_used > limit
    )


#: load configs read on the event loop up to this size (a thread hop costs about 30 us)
_INLINE_CONFIG_BYTES = 16 << 10


def _config_override(name: str, raw: Any) -> ModelConfig | None:
    """The ``config`` parameter of a load request: a model configuration in JSON."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if not isinstance(raw, str):
        raise InvalidInputError(
            "load parameter 'config' must be a string holding a JSON model configuration"
        )
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"load parameter 'config' is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInputError(
            "load parameter 'config' must be a JSON object (a model configuration), got "
            f"{type(document).__name__}"
        )
    return config_from_dict(document, name, "load parameter 'config'")
