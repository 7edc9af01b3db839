"""The repository watcher of ``--model-control-mode poll``: every ``--repository-poll-secs``
it fingerprints each model folder (files, sizes, modification times) and hands the changes
to the lifecycle: new models load, changed ones reload beside the old, removed ones unload.

A remote repository (S3) slots in through ``before_scan``: a blocking call that brings the
local copy up to date before each scan.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: model name -> fingerprint of its folder
Snapshot = Mapping[str, str]


@dataclass(frozen=True)
class Changes:
    """What differs between the repository on disk and what the server knows."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def diff(on_disk: Snapshot, known: Snapshot) -> Changes:
    """Models new on disk, changed since they were (last tried to be) loaded, and gone."""
    return Changes(
        added=tuple(sorted(n for n in on_disk if n not in known)),
        changed=tuple(sorted(n for n in on_disk if n in known and known[n] != on_disk[n])),
        removed=tuple(sorted(n for n in known if n not in on_disk)),
    )


class RepositoryPoller:
    """Runs ``scan`` (blocking, in a thread) every ``interval`` seconds and passes the
    snapshot to ``apply``; an error in one round is logged and the next round runs."""

    def __init__(
        self,
        scan: Callable[[], dict[str, str]],
        apply: Callable[[Snapshot], Awaitable[None]],
        interval: float,
        before_scan: Callable[[], object] | None = None,
    ) -> None:
        self._scan = scan
        self._apply = apply
        self._interval = interval
        self.before_scan = before_scan
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="repository-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def poll_once(self) -> None:
        """One round: refresh (remote repositories), scan, apply the changes."""
        if self.before_scan is not None:
            await asyncio.to_thread(self.before_scan)
        snapshot = await asyncio.to_thread(self._scan)
        await self._apply(snapshot)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)  # the poll period itself, not a wait for state
            try:
                await self.poll_once()
            except Exception:
                logger.exception("polling the model repository failed; trying again")
