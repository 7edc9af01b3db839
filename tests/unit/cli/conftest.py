"""What the CLI tests share: ``inferplex serve`` invoked with a recorder in place of the
server, so a test sees the config a start would use and no server starts."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from inferplex import server
from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """The configs `serve` would start a server with (none is started)."""
    configs: list[ServerConfig] = []

    class Recorded:
        def __init__(self, config: ServerConfig) -> None:
            configs.append(config)

        async def serve_forever(self) -> None:
            return None

    monkeypatch.setattr(server, "Server", Recorded)
    return configs


def serve(*args: str) -> Any:
    """``inferplex serve`` with ``args``, in-process; click's result."""
    return CliRunner().invoke(main, ["serve", *args])
