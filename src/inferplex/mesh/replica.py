"""What a mesh replica loads at start: the models the ring gives it. Any other model is still
served when asked for (``--load-on-demand``), which is what keeps requests answered while the
ring changes or an owner is down; ``--memory-limit`` then evicts such models first as the
least recently used ones once traffic for them returns to their owners."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from inferplex.config.server_config import ServerConfig
from inferplex.errors import ConfigError
from inferplex.mesh.ring import Ring, copies_by_model

logger = logging.getLogger(__name__)


def owned_models(config: ServerConfig, names: Sequence[str]) -> list[str]:
    """The models of ``names`` that this replica (``mesh_self``) owns; all of them without a
    mesh. Blocking (reads each model's config for its ``mesh_copies``). ConfigError for a
    mesh that cannot work."""
    if not config.mesh_replicas:
        return list(names)
    if config.mesh_self not in config.mesh_replicas:
        raise ConfigError(
            f"--mesh-self '{config.mesh_self}' is not one of --mesh-replicas "
            f"{list(config.mesh_replicas)}"
        )
    if not config.load_on_demand:
        raise ConfigError(
            "--mesh-replicas needs --load-on-demand: a replica must answer for a model it does "
            "not own while the ring changes or the model's owner is down"
        )
    ring = Ring(config.mesh_replicas)
    copies = copies_by_model(config.model_repository, names, config.mesh_copies)
    mine = [name for name in names if config.mesh_self in ring.owners(name, copies[name])]
    logger.info(
        "mesh: replica '%s' owns %d of %d models (%d replicas)",
        config.mesh_self,
        len(mine),
        len(names),
        len(config.mesh_replicas),
    )
    return mine
