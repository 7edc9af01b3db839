"""--ports HTTP,GRPC,METRICS for the commands that start servers: parsing, the errors, and
the ports reaching the launcher."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex_tools.benchtool import launch as launch_module
from inferplex_tools.benchtool.launch import RunningServer, launch, parse_ports


def test_parse_ports() -> None:
    assert parse_ports("8000,8001,8002") == (8000, 8001, 8002)
    for bad in ("8000,8001", "8000,8001,x", "8000,8000,8002", "0,1,2", "8000,8001,70000", ""):
        with pytest.raises(ValueError, match="HTTP,GRPC,METRICS") as caught:
            parse_ports(bad)
        assert f"got '{bad}'" in str(caught.value)


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_a_bad_ports_flag_is_refused(command: str, tmp_path: Path) -> None:
    args = [command, "--model", "m", "--ports", "8000,8001"]
    if command == "tune":
        args += ["--model-repository", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--ports" in result.output and "three distinct port numbers" in result.output


def test_bench_takes_ports_only_for_a_server_it_launches() -> None:
    result = CliRunner().invoke(main, ["bench", "--model", "m", "--ports", "8000,8001,8002"])
    assert result.exit_code == 2
    assert "--ports: only for a server the bench launches (--model-repository)" in result.output


def test_launch_serves_on_the_ports_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[Any] = []

    def start_server(repository: Path, log_path: Path, **kwargs: Any) -> RunningServer:
        started.append(kwargs["ports"])
        http, grpc, metrics = kwargs["ports"]
        process = subprocess.Popen(["true"])
        return RunningServer(process, repository, http, grpc, metrics, log_path)

    monkeypatch.setattr(launch_module, "start_server", start_server)
    with launch(tmp_path, ports=(9100, 9101, 9102)) as server:
        assert (server.http, server.grpc, server.metrics) == (
            "127.0.0.1:9100",
            "127.0.0.1:9101",
            "127.0.0.1:9102",
        )
    assert started == [(9100, 9101, 9102)]


def test_an_mlperf_scenario_serves_on_the_ports_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[Any] = []

    class Stop(Exception):
        pass

    def launch_stub(repository: Path, server_args: list[str], ports: Any = None) -> Any:
        asked.append(ports)
        raise Stop

    monkeypatch.setattr(launch_module, "launch", launch_stub)
    args = ["bench", "--model", "m", "--scenario", "offline", "--model-repository", str(tmp_path)]
    result = CliRunner().invoke(main, [*args, "--ports", "9100,9101,9102"])
    assert isinstance(result.exception, Stop), result.output
    assert asked == [(9100, 9101, 9102)]
