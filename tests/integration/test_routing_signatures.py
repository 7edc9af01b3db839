"""A split route over models whose inputs or outputs differ is refused: at start when its
targets are loaded then, else as soon as the target that differs is loaded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import ModelNotReadyError
from inferplex.server import build_engine
from tests.support.lifecycle import add_sub_request

ROUTING = """
routes:
  same: {targets: [{model: add_sub}, {model: add_sub_copy}]}
  wide: {targets: [{model: add_sub, weight: 9}, {model: add_sub_wide, weight: 1}]}
"""
#: what the refusal says: the route, both targets, each tensor that differs
WIDE_ERROR = "route 'wide': targets 'add_sub' and 'add_sub_wide' have different inputs"
WIDE_INPUT = "input 'INPUT0' is FP32 [-1, 16] in 'add_sub' but FP32 [-1, 32] in 'add_sub_wide'"


def repository(repo: Path) -> Path:
    for name, dims in (("add_sub", 16), ("add_sub_copy", 16), ("add_sub_wide", 32)):
        path = modelgen.add_sub(repo, name=name, dims=dims)
        write_config(repo / name, modelgen.model_config(path, max_batch_size=8))
    (repo / "routing.yaml").write_text(ROUTING)
    return repo


async def started(repo: Path, mode: str) -> InferenceEngine:
    engine = build_engine(ServerConfig(model_repository=repo, model_control_mode=mode))
    await engine.start()
    return engine


@pytest.fixture
async def loaded_at_start(tmp_path: Path) -> AsyncIterator[InferenceEngine]:
    engine = await started(repository(tmp_path), "none")
    yield engine
    await engine.stop()


async def test_targets_that_differ_are_refused_at_start(loaded_at_start: InferenceEngine) -> None:
    listing = loaded_at_start.route_listing()
    assert WIDE_ERROR in listing["error"] and WIDE_INPUT in listing["error"]
    assert "'same'" not in listing["error"]
    wide = next(r for r in listing["routes"] if r["name"] == "wide")
    assert "output 'OUTPUT1' is FP32 [-1, 16]" in wide["error"]
    with pytest.raises(ModelNotReadyError, match=WIDE_ERROR):
        await loaded_at_start.infer(add_sub_request("wide"))
    assert not loaded_at_start.model_ready("wide", "")
    response = await loaded_at_start.infer(add_sub_request("same"))
    assert response.model_name in ("add_sub", "add_sub_copy")


async def test_a_target_loaded_later_is_compared_when_it_loads(tmp_path: Path) -> None:
    engine = await started(repository(tmp_path), "explicit")
    try:
        assert engine.route_listing()["error"] == ""  # nothing loaded: nothing to compare
        await engine.load_model("add_sub", {})
        await engine.load_model("add_sub_wide", {})
        with pytest.raises(ModelNotReadyError, match=WIDE_ERROR):
            await engine.infer(add_sub_request("wide"))
        wide = next(r for r in engine.route_listing()["routes"] if r["name"] == "wide")
        assert WIDE_INPUT in wide["error"]
    finally:
        await engine.stop()
