"""Unloading: a model stops serving at once (nothing new reaches it), its requests in flight
finish, then its memory is freed; at shutdown every model, composite ones first."""

from __future__ import annotations

import asyncio
import logging

from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.file_override import OverrideFolders
from inferplex.lifecycle.gpu_memory import GpuMemory
from inferplex.lifecycle.instances import Retirer
from inferplex.lifecycle.memory import rss_bytes
from inferplex.lifecycle.records import ModelRecord, ModelRecords, ModelState

logger = logging.getLogger(__name__)


class Unloader:
    """Takes models out of service and frees them (the loader's other half)."""

    def __init__(
        self,
        records: ModelRecords,
        retirer: Retirer,
        gpu: GpuMemory,
        overrides: OverrideFolders,
    ) -> None:
        self.records = records
        self._retirer = retirer
        self._background: BackgroundWork = retirer.background
        self._gpu = gpu
        self._overrides = overrides

    async def unload(self, name: str, reason: str = "unloaded", forget: bool = False) -> None:
        """Stop serving ``name``: in-flight requests finish, then its memory is freed.
        ``forget`` drops it from the index too (it left the repository)."""
        record = self.records.record(name)
        async with record.lock:
            await self.unload_locked(record, reason)
        if forget:
            self.records.forget(name)

    async def unload_locked(self, record: ModelRecord, reason: str) -> None:
        """``unload`` for a caller that holds the record's lock."""
        versions = list(record.entry.versions.values())
        detail = reason
        if versions:
            # nothing new reaches the model from here on
            self.records.transition(record, ModelState.UNLOADING, detail=reason, versions={})
            before = await self._background.run(rss_bytes)
            await self._retirer.retire(versions)
            after = await self._background.run(rss_bytes)
            detail = f"{reason}: RSS {before} -> {after} bytes"
        record.footprints = {}
        self.records.transition(record, ModelState.UNAVAILABLE, reason, detail=detail)
        self._gpu.release(record.name)
        await self._overrides.release(record.name)

    async def unload_all(self, timeout: float | None = None) -> None:
        """Shutdown: every model drains (up to ``timeout``), then everything is freed.
        Composite models (pipelines, cascades) drain first: their requests in flight still
        call the models they are made of."""
        records = [r for r in self.records.all() if r.entry.versions]
        served = {r.name: list(r.entry.versions.values()) for r in records}
        for composite in (True, False):
            stage = [r for r in records if any(v.composite for v in served[r.name]) is composite]
            for record in stage:
                self.records.transition(
                    record, ModelState.UNLOADING, detail="shutdown", versions={}
                )
            draining = [v.drain(timeout) for r in stage for v in served[r.name]]
            await asyncio.gather(*draining, return_exceptions=True)
        await self._retirer.free([v for versions in served.values() for v in versions])
        for record in records:
            record.footprints = {}
            self.records.transition(record, ModelState.UNAVAILABLE, "unloaded")
            self._gpu.release(record.name)
            await self._overrides.release(record.name)
        self._background.close()
