"""Shared-memory registration is opt-in: off by default, on with --allow-shared-memory or
INFERPLEX_ALLOW_SHARED_MEMORY."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferplex.cli.main import serve
from inferplex.config.server_config import ServerConfig
from inferplex.engine.inference import EXTENSIONS, SHARED_MEMORY_EXTENSION
from inferplex.server import build_engine


def test_off_by_default_on_by_flag_or_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERPLEX_ALLOW_SHARED_MEMORY", raising=False)
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    assert not engine.shared_memory.enabled
    assert SHARED_MEMORY_EXTENSION not in engine.server_metadata()["extensions"]
    flag = next(p for p in serve.params if p.name == "allow_shared_memory")
    assert "--allow-shared-memory" in flag.opts
    monkeypatch.setenv("INFERPLEX_ALLOW_SHARED_MEMORY", "true")
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    assert engine.shared_memory.enabled
    assert engine.server_metadata()["extensions"] == [*EXTENSIONS, "system_shared_memory"]
