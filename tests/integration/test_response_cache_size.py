"""A model that enables the response cache on a server without one (--cache-size 0) loads,
caches nothing and says so in a warning at load."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from inferplex.config.server_config import ServerConfig
from inferplex.server import build_engine
from tests.support.lifecycle import add_model

LOGGER = "inferplex.lifecycle.loader"


@pytest.mark.parametrize("cache_size", [0, 1 << 20])
async def test_enabling_the_cache_without_its_size_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cache_size: int
) -> None:
    add_model(tmp_path, "cached", response_cache={"enable": True})
    config = ServerConfig(
        model_repository=tmp_path, model_control_mode="explicit", cache_size=cache_size
    )
    engine = build_engine(config)
    await engine.start()
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            await engine.load_model("cached", {})
    finally:
        await engine.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    about_cache = [w for w in warnings if "response_cache" in w]
    if cache_size:
        assert about_cache == []
    else:
        (warning,) = about_cache
        assert "model 'cached'" in warning and "--cache-size" in warning
