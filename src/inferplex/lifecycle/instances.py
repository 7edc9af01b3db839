"""A version's instances: made from the load plan (in a thread, the process's RSS measured
around them) and, once the version no longer serves, drained and freed off the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import NamedTuple

from inferplex.backends import Backend
from inferplex.backends.base import InstanceSpec, ModelCaller
from inferplex.core.dispatcher import Dispatcher
from inferplex.core.instance import ModelInstance
from inferplex.core.model import ModelVersion
from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.memory import release_free_memory, rss_bytes
from inferplex.lifecycle.pacing import UNPACED, Pacer
from inferplex.lifecycle.planning import ModelPlan


class Retirer:
    """Takes versions out of scheduling and frees them, at background priority."""

    def __init__(self, background: BackgroundWork) -> None:
        self.background = background
        #: where the versions were scheduled (set when the loader is attached)
        self.dispatcher: Dispatcher | None = None

    async def retire(self, versions: list[ModelVersion], pacer: Pacer = UNPACED) -> None:
        """Drain ``versions`` (no longer served), then free them."""
        if versions:
            await asyncio.gather(*(v.drain() for v in versions))
            await self.free(versions, pacer)

    async def free(self, versions: list[ModelVersion], pacer: Pacer = UNPACED) -> None:
        if self.dispatcher is not None:
            for version in versions:
                self.dispatcher.remove(version.queueing)
        # shielded: a load cancelled while its freeing waits still frees what it replaced
        await asyncio.shield(pacer.step(lambda: self.background.run(_close_versions, versions)))


def instance_specs(plan: ModelPlan, count: int | None) -> list[InstanceSpec]:
    """The config's instances, or ``count`` of them (extra ones like the last)."""
    specs = list(plan.instances)
    if count is None:
        return specs
    return (specs + [specs[-1]] * count)[:count]


class Created(NamedTuple):
    """A version's instances, with the process's RSS (worker processes included: /proc
    reading) right before and after they were made."""

    rss_before: int
    backends: list[Backend]
    rss_after: int


def create_measured(
    plan: ModelPlan, path: Path, specs: list[InstanceSpec], caller: ModelCaller | None
) -> Created:
    before = rss_bytes()
    backends = create_backends(plan, path, specs, caller)
    return Created(before, backends, rss_bytes())


def create_backends(
    plan: ModelPlan, path: Path, specs: list[InstanceSpec], caller: ModelCaller | None
) -> list[Backend]:
    """One backend per spec (all or none: those made are closed if one fails)."""
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


def close_instances(instances: list[ModelInstance]) -> None:
    for instance in instances:
        instance.close()
    release_free_memory()


def _close_versions(versions: list[ModelVersion]) -> None:
    for version in versions:
        version.close()
    release_free_memory()
