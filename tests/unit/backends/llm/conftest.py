"""The tiny LLM folders (built once per session) and engines over them that the tests step
by hand (no engine thread: each test decides when a request joins or leaves)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.llm_models import tiny_llm_repository


@pytest.fixture(scope="session")
def llm_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch").set_num_threads(1)
    return tiny_llm_repository(tmp_path_factory)


@pytest.fixture
def load(llm_repository: Path) -> Iterator[Callable[..., object]]:
    """load(family, **settings) -> a LoadedModel whose engine the test steps."""
    import torch

    from inferplex.backends.llm.loading import load_model
    from inferplex.backends.llm.settings import EngineSettings

    loaded = []

    def make(family: str = "llama", **settings: object) -> object:
        values = {"kv_cache_bytes": 1 << 22, **settings}
        folder = llm_repository / f"tiny_{family}" / "1"
        model = load_model(folder, EngineSettings(**values), torch.device("cpu"), 1, start=False)
        loaded.append(model)
        return model

    yield make
    for model in loaded:
        model.engine.close()
