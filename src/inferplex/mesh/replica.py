"""What a mesh replica loads: the models the ring gives it, at start and again whenever the
members change (``--mesh-members``). Any other model is still served when asked for
(``--load-on-demand``), which is what keeps requests answered while the ring changes or an
owner is down.

On a ring change the replica loads the models it newly owns, one at a time in the background
(each load runs off the event loop, as every load does). The models it no longer owns are not
unloaded here: nginx has already sent their traffic to the new owners (or, until those have
loaded them, still may through its retries and backups), so they become the least recently
used ones and ``--memory-limit`` evicts them first when room is needed, or
``--idle-unload-secs`` once idle. Unloading them at once would make a request that nginx
still sends here (an old nginx config, a retry) load them again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from inferplex.config.server_config import ServerConfig
from inferplex.errors import ConfigError, InferplexError
from inferplex.mesh.members import MemberSource
from inferplex.mesh.ring import Ring, copies_by_model

logger = logging.getLogger(__name__)


def members(config: ServerConfig) -> tuple[str, ...]:
    """The ring's members now: ``mesh_members`` read, else ``mesh_replicas``. Blocking."""
    if config.mesh_members:
        return MemberSource(config.mesh_members).read()
    return config.mesh_replicas


def owned_by(config: ServerConfig, ring: Ring, names: Sequence[str]) -> list[str]:
    """The models of ``names`` that ``mesh_self`` owns on ``ring``. Blocking."""
    copies = copies_by_model(config.model_repository, names, config.mesh_copies)
    return [name for name in names if config.mesh_self in ring.owners(name, copies[name])]


def owned_models(config: ServerConfig, names: Sequence[str]) -> list[str]:
    """The models of ``names`` that this replica (``mesh_self``) owns; all of them without a
    mesh. Blocking (reads each model's config for its ``mesh_copies``). ConfigError for a
    mesh that cannot work."""
    if not config.mesh_replicas and not config.mesh_members:
        return list(names)
    if not config.load_on_demand:
        raise ConfigError(
            "a mesh (--mesh-replicas, --mesh-members) needs --load-on-demand: a replica must "
            "answer for a model it does not own while the ring changes or its owner is down"
        )
    if config.mesh_replicas and config.mesh_members:
        raise ConfigError("give one of --mesh-replicas (a fixed ring) and --mesh-members")
    replicas = members(config)
    if config.mesh_self not in replicas and not config.mesh_members:
        raise ConfigError(
            f"--mesh-self '{config.mesh_self}' is not one of --mesh-replicas {list(replicas)}"
        )
    mine = owned_by(config, Ring(replicas), names)
    logger.info(
        "mesh: replica '%s' owns %d of %d models (%d replicas)",
        config.mesh_self,
        len(mine),
        len(names),
        len(replicas),
    )
    return mine


class Rebalancer:
    """Reads ``--mesh-members`` every ``--mesh-refresh-secs``; on a change loads the models
    this replica newly owns (see the module's docstring for those it no longer owns)."""

    def __init__(
        self,
        config: ServerConfig,
        names: Callable[[], Sequence[str]],
        load: Callable[[str], Awaitable[None]],
        source: MemberSource | None = None,
    ) -> None:
        self.config = config
        self.source = source or MemberSource(config.mesh_members)
        self._names = names
        self._load = load
        self.replicas: tuple[str, ...] = ()
        self._task: asyncio.Task[None] | None = None

    def start(self, replicas: tuple[str, ...]) -> None:
        """Watch from the ring ``replicas`` (what the start loaded from)."""
        self.replicas = replicas
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        stamp = await asyncio.to_thread(self.source.stamp)
        while True:
            await asyncio.sleep(self.config.mesh_refresh_secs)
            now = await asyncio.to_thread(self.source.stamp)
            if now == stamp:
                continue
            stamp = now
            try:
                await self.refresh()
            except InferplexError as exc:
                logger.error("mesh: keeping %s: %s", list(self.replicas), exc.message)
            except OSError as exc:  # the repository's listing
                logger.error("mesh: keeping %s: %s", list(self.replicas), exc)

    async def refresh(self) -> list[str]:
        """Read the members; on a change load what this replica newly owns. The models
        loaded. ConfigError (nothing changes) for members that cannot be read."""
        replicas = await asyncio.to_thread(self.source.read)
        if replicas == self.replicas:
            return []
        names = list(await asyncio.to_thread(self._names))
        before = set(await asyncio.to_thread(owned_by, self.config, Ring(self.replicas), names))
        after = await asyncio.to_thread(owned_by, self.config, Ring(replicas), names)
        gained = [name for name in after if name not in before]
        logger.info(
            "mesh: ring %s -> %s; replica '%s' gains %d model(s), keeps %d, leaves %d to eviction",
            list(self.replicas),
            list(replicas),
            self.config.mesh_self,
            len(gained),
            len(after) - len(gained),
            len(before - set(after)),
        )
        self.replicas = replicas
        for name in gained:
            try:
                await self._load(name)
            except InferplexError as exc:
                logger.error("mesh: model '%s' not loaded: %s", name, exc.message)
        return gained
