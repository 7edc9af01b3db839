"""A replica's rebalance on a ring change: it loads what it newly owns, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.config.server_config import ServerConfig
from inferplex.errors import ConfigError, ModelLoadError
from inferplex.mesh.members import MemberSource
from inferplex.mesh.replica import Rebalancer, owned_models
from inferplex.mesh.ring import Ring

NAMES = [f"m{i}" for i in range(120)]


def _replica(tmp_path: Path, me: str, members: str) -> tuple[Rebalancer, list[str], Path]:
    path = tmp_path / "members"
    path.write_text(members)
    config = ServerConfig(
        model_repository=tmp_path,
        mesh_members=f"file:{path}",
        mesh_self=me,
        load_on_demand=True,
    )
    loaded: list[str] = []

    async def load(name: str) -> None:
        if name == "m13":
            raise ModelLoadError("broken")
        loaded.append(name)

    rebalancer = Rebalancer(config, lambda: NAMES, load)
    rebalancer.replicas = MemberSource(config.mesh_members).read()
    assert owned_models(config, NAMES) == [
        n for n in NAMES if me in Ring(rebalancer.replicas).owners(n, 1)
    ]
    return rebalancer, loaded, path


@pytest.mark.parametrize("me", ["r0", "r1", "r2"])
async def test_a_scale_out_moves_only_models_whose_owners_changed(tmp_path: Path, me: str) -> None:
    rebalancer, loaded, path = _replica(tmp_path, me, "r0\nr1\n")
    path.write_text("r0\nr1\nr2\n")
    gained = await rebalancer.refresh()
    old, new = Ring(("r0", "r1")), Ring(("r0", "r1", "r2"))
    expected = [n for n in NAMES if new.owners(n, 1) == (me,) and old.owners(n, 1) != (me,)]
    assert gained == expected
    assert loaded == [n for n in expected if n != "m13"]  # a failed load is logged, not raised
    if me == "r2":
        assert gained, "the new replica owns nothing"
    else:
        assert not gained  # a replica that stays gains nothing when one joins
    assert await rebalancer.refresh() == []  # the same ring again: nothing


async def test_a_scale_in_gives_the_leaving_replicas_models_to_the_others(tmp_path: Path) -> None:
    rebalancer, _, path = _replica(tmp_path, "r0", "r0\nr1\nr2\n")
    path.write_text("r0\nr1\n")
    gained = await rebalancer.refresh()
    old, new = Ring(("r0", "r1", "r2")), Ring(("r0", "r1"))
    assert gained and all(old.owners(n, 1) == ("r2",) for n in gained)
    assert set(gained) == {
        n for n in NAMES if old.owners(n, 1) == ("r2",) and new.owners(n, 1) == ("r0",)
    }


async def test_unreadable_members_keep_the_ring(tmp_path: Path) -> None:
    rebalancer, loaded, path = _replica(tmp_path, "r0", "r0\nr1\n")
    path.write_text("")
    with pytest.raises(ConfigError, match="names no replica"):
        await rebalancer.refresh()
    assert rebalancer.replicas == ("r0", "r1") and not loaded
