"""Shared fixtures: the test model repository and a real server process serving it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.repository import build_test_repository

#: The body size limit the `server` fixture runs with (tests of 413 rely on it).
MAX_REQUEST_BYTES = 1024 * 1024


@pytest.fixture(scope="session")
def test_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_test_repository(tmp_path_factory.mktemp("repository"))


@pytest.fixture(scope="session")
def server(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """`inferplex serve` in a subprocess on free loopback ports."""
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    running = start_server(
        test_repository, log_path, env={"INFERPLEX_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES)}
    )
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


#: The servers the protocol and security tests run against: the built-in HTTP and gRPC
#: servers, and their reference twins (uvicorn, grpc.aio) in one process (DESIGN.md, "The edge").
TWINS = {
    "builtin": {},
    "reference": {"http_server": "uvicorn", "grpc_server": "grpcio"},
}


@pytest.fixture(scope="session")
def reference_server(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The `server` fixture's server with the reference twins: uvicorn and grpc.aio."""
    log_path = tmp_path_factory.mktemp("reference-server") / "server.log"
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in TWINS["reference"].items()}
    running = start_server(
        test_repository,
        log_path,
        env={"INFERPLEX_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES), **settings},
    )
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


@pytest.fixture(scope="module", params=list(TWINS))
def twin_server(request: pytest.FixtureRequest) -> RunningServer:
    """`server`, then `reference_server`: a module's tests run against each in turn."""
    name = "server" if request.param == "builtin" else "reference_server"
    running: RunningServer = request.getfixturevalue(name)
    return running
