"""The ring: deterministic, balanced, minimal movement, per-model copies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from inferplex.errors import ConfigError
from inferplex.mesh.ring import Ring, copies, copies_by_model

MODELS = [f"model_{i:03d}" for i in range(300)]


def test_owners_are_distinct_and_the_same_in_every_ring_built() -> None:
    ring, again = Ring(["a", "b", "c"]), Ring(["a", "b", "c"])
    for model in MODELS[:50]:
        owners = ring.owners(model, 2)
        assert len(set(owners)) == 2
        assert owners == again.owners(model, 2)
        assert ring.owners(model, 1) == owners[:1]  # the next owner extends the first


def test_more_copies_than_replicas_gives_every_replica() -> None:
    assert sorted(Ring(["a", "b"]).owners("m", 5)) == ["a", "b"]


def test_each_replica_gets_about_its_share() -> None:
    counts = Counter(Ring(["a", "b", "c"]).owners(m, 1)[0] for m in MODELS)
    assert set(counts) == {"a", "b", "c"}
    assert all(70 <= n <= 130 for n in counts.values()), counts


def test_a_new_replica_takes_models_only_for_itself() -> None:
    before, after = Ring(["a", "b", "c"]), Ring(["a", "b", "c", "d"])
    moved = [m for m in MODELS if before.owners(m, 1) != after.owners(m, 1)]
    assert moved and all(after.owners(m, 1) == ("d",) for m in moved)
    assert len(moved) < len(MODELS) / 2


@pytest.mark.parametrize("replicas", [[], ["a", "a"]])
def test_a_ring_needs_distinct_replicas(replicas: list[str]) -> None:
    with pytest.raises(ConfigError):
        Ring(replicas)


def _model(repo: Path, name: str, parameters: str = "") -> None:
    (repo / name).mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'backend: "onnxruntime"\n{parameters}')


def test_copies_come_from_the_models_config(tmp_path: Path) -> None:
    _model(tmp_path, "hot", 'parameters { key: "mesh_copies" value { string_value: "3" } }')
    _model(tmp_path, "plain")
    (tmp_path / "no_config").mkdir()
    assert copies_by_model(tmp_path, ["hot", "plain", "no_config"], 2) == {
        "hot": 3,
        "plain": 2,
        "no_config": 2,
    }


def test_bad_copies_fail_naming_the_parameter(tmp_path: Path) -> None:
    _model(tmp_path, "bad", 'parameters { key: "mesh_copies" value { string_value: "0" } }')
    with pytest.raises(ConfigError, match="mesh_copies"):
        copies(tmp_path / "bad", 1)
