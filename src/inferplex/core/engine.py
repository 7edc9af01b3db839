"""InferenceEngine: the one facade every frontend calls.

Frontends translate wire formats into core types and call these methods; they never reach
past the engine. Metadata, statistics and index answers are plain dicts in the V2 / Triton
JSON shapes, which both the REST and the gRPC codecs render.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from inferplex.config.model_config import ModelConfig
from inferplex.config.server_config import ServerConfig
from inferplex.core.cache import ResponseCache
from inferplex.core.caller import EngineCaller
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.registry import ModelRegistry, ModelState
from inferplex.core.scheduler import Scheduler
from inferplex.core.types import InferenceRequest, InferenceResponse
from inferplex.version import __version__

#: Protocol extensions implemented in full (perf_analyzer polls statistics when listed).
EXTENSIONS = ("binary_tensor_data", "model_configuration", "statistics")


class InferenceEngine:
    """Owns the models; answers health, metadata, statistics and inference."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.registry = ModelRegistry(config.model_repository, config.intra_op_threads)
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
        self.dispatcher = Dispatcher(scheduler, loop)
        cache = ResponseCache(config.cache_size) if config.cache_size else None
        await self.registry.load_all(self.dispatcher, cache, EngineCaller(self.infer, loop))
        self._started = ready

    def set_ready(self) -> None:
        self._started = True

    def begin_shutdown(self) -> None:
        """Readiness goes false; requests still being served carry on."""
        self._stopping = True

    async def stop(self, drain_timeout: float | None = 30.0) -> None:
        """Stop taking requests, let in-flight ones finish, free every model."""
        self.begin_shutdown()
        await self.registry.unload_all(drain_timeout)

    # -- health and metadata ----------------------------------------------------------------
    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self._started and not self._stopping

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.config.server_name,
            "version": __version__,
            "extensions": list(EXTENSIONS),
        }

    def model_ready(self, name: str, version: str = "") -> bool:
        entry = self.registry.entry(name)
        if entry.state is not ModelState.READY:
            return False
        self.registry.route(name, version)  # raises for an unknown version
        return True

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
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
        if version:
            self.registry.route(name, version)
        return self.registry.config(name)

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        if name:
            served = (
                [self.registry.route(name, version)]
                if version
                else list(self.registry.entry(name).versions.values())
            )
        else:
            served = [v for e in self.registry.entries() for v in e.versions.values()]
        return [v.statistics() for v in served]

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        index: list[dict[str, Any]] = []
        for entry in self.registry.entries():
            if ready_only and entry.state is not ModelState.READY:
                continue
            if entry.versions:
                index.extend(
                    {
                        "name": entry.name,
                        "version": str(v),
                        "state": entry.state.value,
                        "reason": entry.reason,
                    }
                    for v in sorted(entry.versions)
                )
            else:
                index.append(
                    {
                        "name": entry.name,
                        "version": "",
                        "state": entry.state.value,
                        "reason": entry.reason,
                    }
                )
        return index

    # -- inference ------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        return await self.registry.route(request.model_name, request.model_version).infer(request)
