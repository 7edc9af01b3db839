"""A real engine on a tiny repository (add_sub with dynamic batching, and a broken model)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor


@pytest.fixture(scope="module")
def small_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("metrics-repo")
    path = modelgen.add_sub(repo)
    config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
    write_config(repo / "add_sub", config)
    modelgen.add_sub(repo, name="broken")
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: -3\n')
    return repo


@pytest.fixture
async def engine(small_repository: Path) -> AsyncIterator[InferenceEngine]:
    engine = build_engine(ServerConfig(model_repository=small_repository))
    await engine.start()
    yield engine
    await engine.stop()


def add_sub(rows: int = 1) -> InferenceRequest:
    a = np.ones((rows, 16), dtype=np.float32)
    return InferenceRequest(
        "add_sub", [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", a.shape, a)]
    )
