"""What a mesh replica loads at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferplex.config.server_config import ServerConfig
from inferplex.errors import ConfigError
from inferplex.mesh.replica import owned_models

NAMES = [f"m{i}" for i in range(60)]


def _config(repo: Path, me: str, **more: Any) -> ServerConfig:
    settings: dict[str, Any] = {
        "model_repository": repo,
        "mesh_replicas": "r0, r1,r2",
        "mesh_self": me,
        "load_on_demand": True,
    }
    return ServerConfig(**{**settings, **more})


def test_the_replicas_split_the_models(tmp_path: Path) -> None:
    owned = [owned_models(_config(tmp_path, me), NAMES) for me in ("r0", "r1", "r2")]
    assert sorted(name for mine in owned for name in mine) == sorted(NAMES)
    assert all(owned)


def test_with_two_copies_each_model_has_two_owners(tmp_path: Path) -> None:
    owned = [owned_models(_config(tmp_path, me, mesh_copies=2), NAMES) for me in ("r0", "r1", "r2")]
    assert all(sum(name in mine for mine in owned) == 2 for name in NAMES)


def test_without_a_mesh_every_model_loads(tmp_path: Path) -> None:
    assert owned_models(ServerConfig(model_repository=tmp_path), NAMES) == NAMES


def test_self_must_be_a_replica(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--mesh-self 'r9'"):
        owned_models(_config(tmp_path, "r9"), NAMES)


def test_the_mesh_needs_load_on_demand(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--load-on-demand"):
        owned_models(_config(tmp_path, "r0", load_on_demand=False), NAMES)


@pytest.mark.parametrize("given", ["r0,r1, r2", ("r0,r1", "r2"), '["r0", "r1", "r2"]'])
def test_replica_names_from_a_flag_repeated_flags_or_the_environment(
    tmp_path: Path, given: Any
) -> None:
    config = ServerConfig(model_repository=tmp_path, mesh_replicas=given)
    assert config.mesh_replicas == ("r0", "r1", "r2")


def test_a_fixed_ring_and_members_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give one of --mesh-replicas"):
        owned_models(_config(tmp_path, "r0", mesh_members=f"file:{tmp_path}/m"), NAMES)
