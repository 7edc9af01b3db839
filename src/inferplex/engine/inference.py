"""InferenceEngine: the one facade every frontend calls.

Frontends translate wire formats into core types and call these methods; they never reach
past the engine. Metadata, statistics and index answers are plain dicts in the V2 / Triton
JSON shapes, which both the REST and the gRPC codecs render.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from inferplex.config.model_config import ModelConfig
from inferplex.config.server_config import ServerConfig
from inferplex.core.cache import ResponseCache
from inferplex.core.caller import EngineCaller
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.model import ModelVersion
from inferplex.core.registry import ModelRegistry
from inferplex.core.scheduler import Scheduler
from inferplex.core.snapshot import EngineSnapshot
from inferplex.core.stats import ACTIVITY
from inferplex.core.streaming import Responses, SingleResponse
from inferplex.core.validation import RequestValidator
from inferplex.errors import InferplexError, ModelNotFoundError, ModelNotReadyError
from inferplex.lifecycle.manager import LifecycleManager
from inferplex.repository.s3 import S3Repository
from inferplex.resilience.guard import ModelGuards
from inferplex.routing.route import BreakerOpen, Queued, Serve
from inferplex.routing.signatures import ConfigOf
from inferplex.routing.table import RouteTable
from inferplex.shm import SharedMemoryRegistry
from inferplex.types import InferenceRequest, InferenceResponse
from inferplex.version import __version__

#: Protocol extensions implemented in full (perf_analyzer polls statistics when listed);
#: system_shared_memory is listed only where the server allows it (--allow-shared-memory).
EXTENSIONS = (
    "binary_tensor_data",
    "classification",  # answered by the data plane (dataplane/classes.py)
    "model_configuration",
    "model_repository",
    "statistics",
)
SHARED_MEMORY_EXTENSION = "system_shared_memory"


#: what makes the route table, given the engine's ways to serve a model, count its queued
#: requests, read its circuit breaker and its config
RouteTableFactory = Callable[[Serve, Queued, BreakerOpen, ConfigOf], RouteTable]


class InferenceEngine:
    """Owns the models; answers health, metadata, statistics and inference.

    Its collaborators are made by the composition root (``inferplex.server.build_engine``)
    and handed in, so a test builds an engine on fakes."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        registry: ModelRegistry,
        lifecycle: LifecycleManager,
        guards: ModelGuards,
        routes: RouteTableFactory,
        shared_memory: SharedMemoryRegistry,
        remote: S3Repository | None = None,
    ) -> None:
        """``lifecycle`` loads into ``registry``; ``guards`` are the circuit breakers and
        request timeouts, ``routes`` makes the table of routing.yaml (docs/routing.md);
        ``shared_memory`` holds the regions clients registered (frontends register them,
        codecs read and write them); ``remote``, a bucket synced into the repository folder
        before each scan and explicit load."""
        self.config = config
        self.registry = registry
        self.lifecycle = lifecycle
        self.guards = guards
        self.routes = routes(self.serve, self._queued, guards.is_open, self._config_of)
        self.remote = remote
        self.shared_memory = shared_memory
        lifecycle.before_scan = self._before_scan
        self._routes_reload: asyncio.Task[bool] | None = None
        self.dispatcher: Dispatcher | None = None  # made by ``start``
        self._started = False
        self._stopping = False

    async def start(self, *, ready: bool = True) -> None:
        """Load the repository. Models that fail are reported in the index, not raised.
        With ``ready=False`` readiness waits for ``set_ready`` (the server opens its
        listeners first, so a ready server answers on every port)."""
        config = self.config
        scheduler = Scheduler(
            config.scheduling_policy,
            config.max_concurrent_batches or os.cpu_count() or 1,
            config.rate_limit_resources,
        )
        loop = asyncio.get_running_loop()
        self.dispatcher = Dispatcher(
            scheduler,
            loop,
            config.inline_execution_us * 1e-6,
            learn_delay=config.queue_delay == "learned",
        )
        cache = ResponseCache(config.cache_size) if config.cache_size else None
        self._loop = loop
        if self.remote is not None:
            await asyncio.to_thread(self.remote.refresh)
        await self.lifecycle.start(
            self.dispatcher, cache, EngineCaller(self.infer, loop, self.stream, self.dispatcher)
        )
        await self._reload_routes()
        self._started = ready
        self.registry.status.fire()

    def set_ready(self) -> None:
        self._started = True
        self.registry.status.fire()

    def begin_shutdown(self) -> None:
        """Readiness goes false; requests still being served carry on."""
        self._stopping = True
        self.registry.status.fire()

    async def stop(self, drain_timeout: float | None = 30.0) -> None:
        """Stop taking requests, let in-flight ones finish, free every model."""
        self.begin_shutdown()
        if self._routes_reload is not None:
            self._routes_reload.cancel()
        await self.routes.close()
        await self.lifecycle.stop(drain_timeout)
        if self.dispatcher is not None:  # (every model is freed: its threads are idle)
            await asyncio.to_thread(self.dispatcher.close)
        self.shared_memory.close()

    # -- health and metadata ----------------------------------------------------------------
    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        """Started and not stopping; with strict readiness, also every model asked for
        READY (``ModelRegistry.all_ready``)."""
        if self.config.strict_readiness and not self.registry.all_ready():
            return False
        return self._started and not self._stopping

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.config.server_name,
            "version": __version__,
            "extensions": [
                *EXTENSIONS,
                *([SHARED_MEMORY_EXTENSION] if self.shared_memory.enabled else []),
            ],
        }

    def model_ready(self, name: str, version: str = "") -> bool:
        route = self.routes.get(name)
        if route is not None:
            return route.ready(version, self.model_ready)
        return self.registry.ready(name, version)  # raises for an unknown version

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        route = self.routes.get(name)
        if route is not None:  # a route shows its first target's metadata under its name
            target = route.primary(version)
            return {**self.model_metadata(target.model, target.version), "name": name}
        config = self.registry.config(name)
        entry = self.registry.entry(name)
        if version:
            self.registry.route(name, version)
        return {
            "name": name,
            "versions": [str(v) for v in sorted(entry.versions)],
            "platform": config.platform or config.backend,
            "inputs": [
                {"name": t.name, "datatype": t.data_type, "shape": config.full_shape(t)}
                for t in config.input
            ],
            "outputs": [
                {"name": t.name, "datatype": t.data_type, "shape": config.full_shape(t)}
                for t in config.output
            ],
        }

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        route = self.routes.get(name)
        if route is not None:
            target = route.primary(version)
            config = self.model_config(target.model, target.version)
            return config.model_copy(update={"name": name})
        if version:
            self.registry.route(name, version)
        return self.registry.config(name)

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        route = self.routes.get(name) if name else None
        if route is not None:  # the statistics of the models behind the route
            route.primary(version)  # a route has no versions
            serving = {e.name for e in self.registry.entries() if e.versions}
            models = dict.fromkeys(t.model for t in route.members if t.model in serving)
            return [s for model in models for s in self.model_statistics(model)]
        if name:
            served = [self.registry.route(name, version)] if version else self.registry.served(name)
        else:
            served = [v for e in self.registry.entries() for v in e.versions.values()]
        statistics = [v.statistics() for v in served]
        for stats in statistics:
            breaker = self.guards.statistics(stats["name"])
            if breaker is not None:
                stats["circuit_breaker"] = breaker
        return statistics

    def snapshot(self) -> EngineSnapshot:
        """The models, their states and served versions with their counters, for the
        metrics port and the dashboard (read on the event loop, never per request)."""
        lifecycle = self.lifecycle
        return EngineSnapshot(
            self.config.server_name,
            self.ready(),
            self.registry.snapshot(lifecycle.footprints()),
            lifecycle.transitions(),
        )

    def activity(self) -> int | None:
        """A count that moves whenever what ``snapshot`` shows may have changed; None while
        requests are queued or running (their queue and busy time change without it)."""
        if self.dispatcher is not None and self.dispatcher.busy():
            return None
        return ACTIVITY.count

    def route_listing(self) -> dict[str, Any]:
        """Every route of routing.yaml (docs/routing.md)."""
        return self.routes.listing()

    def route_statistics(self, name: str) -> dict[str, Any]:
        """Requests per target, the shadow's latency and output difference, degradations."""
        return self.routes.statistics(name)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self.registry.index(ready_only)

    # -- model management (docs/lifecycle.md) --------------------------------------------------
    async def load_model(self, name: str, parameters: Mapping[str, Any]) -> None:
        """Load or reload a model (the repository API; refused in control mode none)."""
        if self.remote is not None:  # explicit mode: load what the bucket holds now
            await asyncio.to_thread(self.remote.refresh)
        await self.lifecycle.load(name, parameters)

    async def unload_model(self, name: str, parameters: Mapping[str, Any]) -> None:
        await self.lifecycle.unload(name, parameters)

    async def set_instance_count(self, name: str, count: Any) -> None:
        """Run ``count`` instances per served version of the model, without a reload."""
        await self.lifecycle.set_instance_count(name, count)

    def set_default_version(self, name: str, version: Any) -> None:
        """Route the model's unversioned requests to ``version`` ("" = the highest)."""
        self.lifecycle.set_default_version(name, version)

    def memory(self) -> dict[str, Any]:
        return self.lifecycle.memory()

    # -- inference ------------------------------------------------------------------------
    def input_checks(self, name: str, version: str = "") -> RequestValidator | None:
        """What the model serving a request checks of its inputs, for a frontend to run on
        each input's declared datatype and shape before it decodes a large body
        (``RequestValidator.check_declared``); None where that is not known before the
        request runs (a route, a model that is not loaded). Reads only: safe off the loop."""
        if self.routes.get(name) is not None:
            return None
        try:
            served = self.registry.route(name, version)
        except InferplexError:
            return None
        return RequestValidator(served.config)

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        route = self.routes.get(request.model_name)
        if route is not None:
            return await route.infer(request)
        return await self.serve(request)

    async def stream(self, request: InferenceRequest) -> Responses:
        """The responses to one request as the model sends them (docs/streaming.md): a
        decoupled model's 0..N, an ordinary model's one. The caller ``close``s the stream if
        it stops reading before the final response; InferplexError at once for a request the
        model cannot take."""
        if self.routes.get(request.model_name) is None:
            served = await self._served(request)
            if served.decoupled:  # behind its breaker, as ``serve`` is
                bound = self.config.stream_queue_responses
                guard = self.guards.get(served.config)
                if guard is None:
                    return served.stream(request, bound)
                return guard.stream(served, request, bound)
        return SingleResponse(functools.partial(self.infer, request))

    async def _served(self, request: InferenceRequest) -> ModelVersion:
        try:
            return self.registry.route(request.model_name, request.model_version)
        except (ModelNotFoundError, ModelNotReadyError):
            if not self.config.load_on_demand:
                raise
            return await self.lifecycle.load_for_request(request.model_name, request.model_version)

    async def serve(self, request: InferenceRequest) -> InferenceResponse:
        """Inference on a model (not a route), behind its circuit breaker and timeout."""
        served = await self._served(request)
        guard = self.guards.get(served.config)
        if guard is None:
            return await served.infer(request)
        return await guard.infer(served, request)

    # -- routes and remote repositories (docs/routing.md) ---------------------------------------
    def _config_of(self, model: str) -> ModelConfig | None:
        entry = self.registry.get(model)
        return entry.config if entry is not None else None

    def _queued(self, model: str, version: str) -> int:
        return self.registry.route(model, version).queue.pending_requests

    async def _reload_routes(self) -> bool:
        names = [e.name for e in self.registry.entries()]
        changed = await self.routes.reload(self.config.model_repository, names)
        self.registry.status.fire()  # a route's readiness is its targets'
        return changed

    def _before_scan(self) -> None:
        """Before each poll-mode scan (in a worker thread): sync a remote repository, then
        re-read routing.yaml on the loop."""
        if self.remote is not None:
            self.remote.refresh()
        self._loop.call_soon_threadsafe(self._start_routes_reload)

    def _start_routes_reload(self) -> None:
        if self._stopping or (self._routes_reload and not self._routes_reload.done()):
            return
        self._routes_reload = self._loop.create_task(self._reload_routes())
