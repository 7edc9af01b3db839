"""Room for a load: the memory budgets a model must fit before it loads, and the idle models
evicted (least recently used first) to make it.

- ``--memory-limit``: the loaded models' footprints (memory.py measures them);
- ``--process-memory-limit``: the whole server's RSS, its own memory included, and the
  load's peak (a load holds more while it runs than it keeps: lifecycle.md);
- ``--gpu-memory-limit``: each GPU's models (gpu_memory.py).

Every budget is weighed, and may refuse, before anything is evicted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from inferplex.config.model_config import ModelConfig
from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.gpu_memory import GpuMemory
from inferplex.lifecycle.memory import Resident, choose_evictions, rss_bytes
from inferplex.lifecycle.records import ModelRecord, ModelRecords

#: a model parameter (config ``parameters``) that keeps the model from being evicted
PINNED_PARAMETER = "pinned"
PROCESS_BUDGET = "--process-memory-limit"

#: unloads a model (its lock held by the caller) with the given reason
Evict = Callable[[ModelRecord, str], Awaitable[None]]


class MemoryBudgets:
    """The host and GPU budgets of the loaded models, and the evictions that keep to them."""

    def __init__(
        self,
        records: ModelRecords,
        background: BackgroundWork,
        evict: Evict,
        memory_limit: int = 0,
        process_memory_limit: int = 0,
        gpu: GpuMemory | None = None,
    ) -> None:
        self.records = records
        self.memory_limit = memory_limit
        #: the whole server's RSS, its own memory included (--process-memory-limit)
        self.process_memory_limit = process_memory_limit
        #: per-GPU budgets (--gpu-memory-limit); inactive without limits or a GPU
        self.gpu = gpu or GpuMemory({})
        self._background = background
        self._evict = evict

    async def make_room(
        self,
        record: ModelRecord,
        needed: int,
        gpu_needed: Mapping[int, int] | None = None,
        transient: int = 0,
        after_load: bool = False,
    ) -> None:
        """Evict idle models (least recently used first) until ``needed`` more bytes fit into
        the memory limit and ``gpu_needed`` (GPU -> bytes) into each GPU's limit, and
        ``needed`` plus ``transient`` (what the load holds only while it runs) into the
        process limit; InsufficientMemoryError, with nothing evicted, when even that cannot
        make room. ``after_load``: ``record`` has just loaded (needing nothing more), and the
        budgets are checked against what it measured."""
        if not self.memory_limit and not self.process_memory_limit and not self.gpu.active:
            return  # no budget: nothing to weigh (the residents are a walk over every model)
        while True:
            residents = self._residents(record, after_load)
            choices = []
            if self.memory_limit:
                victims = choose_evictions(
                    self.memory_limit, needed, residents, record.name, after_load=after_load
                )
                choices.append((victims, "--memory-limit"))
            if self.process_memory_limit:
                victims = await self._process_evictions(
                    record, needed + transient, residents, after_load
                )
                choices.append((victims, PROCESS_BUDGET))
            choices.append(self.gpu.evictions(gpu_needed or {}, residents, record.name))
            victims, budget = next(((v, b) for v, b in choices if v), ([], ""))
            if not victims:
                return
            victim = self.records.record(victims[0].name)
            async with victim.lock:  # free: only unlocked models are evictable
                await self._evict(victim, f"evicted to make room for '{record.name}' ({budget})")

    async def _process_evictions(
        self, record: ModelRecord, needed: int, residents: list[Resident], after_load: bool
    ) -> list[Resident]:
        """The idle models to unload so that the server's RSS plus ``needed`` fits into the
        process limit, each counted as its footprint (make_room reads the RSS again after
        each eviction: an unload may return less). The server's own memory (the RSS less
        the footprints) counts as a resident that cannot be evicted."""
        rss = await self._background.run(rss_bytes)
        own = max(0, rss - sum(r.footprint for r in residents))
        server = Resident("(the server's own memory)", own, 0.0, False, "not a model")
        return choose_evictions(
            self.process_memory_limit,
            needed,
            [*residents, server],
            record.name,
            PROCESS_BUDGET,
            after_load,
        )

    def _residents(self, loading: ModelRecord, after_load: bool) -> list[Resident]:
        residents = []
        for r in self.records.all():
            if not r.footprints:
                continue
            why = ""
            if r is loading:
                # before a load its footprints are the versions serving now (a reload)
                why = "just loaded" if after_load else "serving while it reloads"
            elif is_pinned(r):
                why = "pinned"
            elif r.entry.in_flight:
                why = "requests in flight"
            elif r.lock.locked():
                why = "loading or unloading"
            residents.append(Resident(r.name, r.footprint, r.entry.last_used, not why, why))
        return residents


def is_pinned(record: ModelRecord) -> bool:
    """Whether the model is kept from eviction and idle unloading: by a load request's
    ``pinned`` or by its config."""
    return record.pinned or pinned_by_config(record.entry.config)


def pinned_by_config(config: ModelConfig | None) -> bool:
    """Whether the model's config pins it (``parameters { key: "pinned" value: "true" }``)."""
    return config is not None and config.parameters.get(PINNED_PARAMETER, "").lower() == "true"
