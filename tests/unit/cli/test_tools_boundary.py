"""The tools (``inferplex_tools``) stay out of a serving process: ``inferplex serve`` and a
started server import none of their modules; the ``inferplex`` command still offers them,
loading one when it is named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from inferplex.cli.main import main

#: started in a fresh interpreter: the command's imports, then a real server on free loopback
#: ports over an empty repository, started and stopped; prints the tools' modules it holds
_SERVE = """
import asyncio, sys
from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server

async def run():
    config = ServerConfig(
        model_repository=sys.argv[1], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0
    )
    server = Server(config)
    await server.start()
    await server.stop(grace=1.0)

asyncio.run(run())
print("tools:", *sorted(m for m in sys.modules if m.split(".")[0] == "inferplex_tools"))
"""


def test_a_started_server_imports_no_tool(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _SERVE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1:] == ["tools:"], done.stdout


def test_the_command_offers_the_tools() -> None:
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0, listed.output
    for name in ("bench", "tune", "optimize", "heatmap", "serve", "mesh"):
        assert f"  {name} " in listed.output, listed.output
    bench = CliRunner().invoke(main, ["bench", "--help"])
    assert bench.exit_code == 0, bench.output
    assert "--concurrency" in bench.output
    unknown = CliRunner().invoke(main, ["benchh"])
    assert unknown.exit_code == 2
    assert "No such command 'benchh'" in unknown.output
