"""Bad options of bench, tune and heatmap: a clear message and exit code 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "args,message",
    [
        (["bench"], "--model: give at least one model"),
        (["bench", "--model", "m", "--concurrency", "1,x"], "comma-separated numbers"),
        (["bench", "--model", "m", "--concurrency", "0"], "--concurrency: expected integers >= 1"),
        (["bench", "--model", "m", "--url", "nohost"], "--url: expected HOST:PORT"),
        (["bench", "--model", "m", "--stability", "0"], "--stability"),
        (["bench", "--model", "m", "--shape", "A:1,x"], "--shape: expected NAME:d0,d1"),
        (
            ["bench", "--model", "m", "--policies", "priority"],
            "--policies needs --model-repository",
        ),
        (["bench", "--model", "m", "--record-metrics", "absent/x.jsonl"], "needs --metrics-url"),
    ],
)
def test_bench_option_errors(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output


def test_bench_names_an_unreachable_server() -> None:
    url = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(main, ["bench", "--url", url, "--model", "m"])
    assert result.exit_code == 2
    assert f"cannot reach http://{url}/v2" in result.output


def test_tune_and_heatmap_errors(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["tune", "--model-repository", str(tmp_path), "--model", "absent"]
    )
    assert result.exit_code == 2 and "--model: no folder" in result.output
    bad = tmp_path / "m.jsonl"
    bad.write_text("[]\n")
    result = CliRunner().invoke(main, ["heatmap", "--input", str(bad), "--out", "x.png"])
    assert result.exit_code == 2 and "expected a JSON object with 'time'" in result.output
