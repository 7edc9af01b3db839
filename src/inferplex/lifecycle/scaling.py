"""Instance counts changed at run time: a served version gains instances when they are made
and loses its surplus ones when their batch ends, without a reload."""

from __future__ import annotations

import asyncio
import logging

from inferplex.backends.base import ModelCaller
from inferplex.errors import InvalidInputError, ModelNotReadyError
from inferplex.lifecycle.background import BackgroundWork
from inferplex.lifecycle.instances import close_instances, create_backends, instance_specs
from inferplex.lifecycle.planning import check_instance_count
from inferplex.lifecycle.records import ModelRecords

logger = logging.getLogger(__name__)


class InstanceScaler:
    """Sets the instance count of the served versions of a model."""

    def __init__(
        self, records: ModelRecords, background: BackgroundWork, max_instances: int
    ) -> None:
        self.records = records
        #: through which new instances reach other served models (set when attached)
        self.caller: ModelCaller | None = None
        self._background = background
        self._max_instances = max_instances

    async def set_instance_count(self, name: str, count: int) -> None:
        """Run ``count`` instances of every served version of ``name``, without a reload:
        new instances join when created, surplus ones leave when their batch ends."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidInputError(
                f"instance 'count' must be an integer from 1 to {self._max_instances}, got "
                f"{count!r}"
            )
        check_instance_count(name, count, self._max_instances)
        record = self.records.record(name)
        async with record.lock:
            plan = record.plan
            versions = record.entry.versions
            if not versions or plan is None:
                raise ModelNotReadyError(f"model '{name}' is {record.state.value}: not loaded")
            if plan.config.sequence_batching is not None:
                raise InvalidInputError(
                    f"model '{name}' is a sequence model: its sequences keep to their "
                    "instances, so its instance count changes only with a reload "
                    "(instance_group count)"
                )
            for version, served in versions.items():
                have = len(served.instances)
                if count > have:
                    specs = instance_specs(plan, count)[have:]
                    path = plan.version_files[version]
                    backends = await asyncio.to_thread(
                        create_backends, plan, path, specs, self.caller
                    )
                    served.add_instances(backends)
                elif count < have:
                    retired = await served.retire_instances(have - count)
                    await self._background.run(close_instances, retired)
            record.instance_count = count
        logger.info("model '%s' runs %d instance(s) per version", name, count)
