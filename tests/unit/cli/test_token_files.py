"""Tokens from files (--inference-token-file, --management-token-file): read at start, one
trailing newline dropped; an unreadable, empty, blank-padded or other-readable file, and a
token given both ways, stop the start (exit 2) with a message naming the flag and file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig

#: no token of the environment this runs in may mix into these tests
CLEAN = {
    name: None
    for name in (
        "INFERPLEX_INFERENCE_TOKEN",
        "INFERPLEX_MANAGEMENT_TOKEN",
        "INFERPLEX_INFERENCE_TOKEN_FILE",
        "INFERPLEX_MANAGEMENT_TOKEN_FILE",
    )
}


def token_file(folder: Path, content: bytes, mode: int = 0o600, name: str = "token") -> Path:
    path = folder / name
    path.write_bytes(content)
    path.chmod(mode)
    return path


def test_tokens_are_read_from_their_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    inference = token_file(tmp_path, b"inference-secret\n", name="i")
    management = token_file(tmp_path, b"management-secret\r\n", 0o400, name="m")
    monkeypatch.setenv("INFERPLEX_MANAGEMENT_TOKEN_FILE", str(management))
    config = ServerConfig(model_repository=tmp_path, inference_token_file=inference)
    assert config.inference_token is not None and config.management_token is not None
    assert config.inference_token.get_secret_value() == "inference-secret"
    assert config.management_token.get_secret_value() == "management-secret"
    assert "secret" not in repr(config)


def test_a_pipe_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CLEAN:
        monkeypatch.delenv(name, raising=False)
    read, write = os.pipe()
    os.write(write, b"piped-secret\n")
    os.close(write)
    try:
        config = ServerConfig(model_repository=tmp_path, inference_token_file=f"/dev/fd/{read}")
    finally:
        os.close(read)
    assert config.inference_token is not None
    assert config.inference_token.get_secret_value() == "piped-secret"


@pytest.mark.parametrize(
    ("content", "mode", "expected"),
    [
        (b"", 0o600, "is empty"),
        (b"\n", 0o600, "is empty"),
        (b" padded \n", 0o600, "blanks around the token"),
        (b"secret\n", 0o644, "may be read or written by other users"),
        (b"secret\n", 0o620, "may be read or written by other users"),
        (b"\xff\xfe", 0o600, "is not UTF-8 text"),
    ],
)
def test_a_bad_file_stops_the_start_naming_it(
    tmp_path: Path, content: bytes, mode: int, expected: str
) -> None:
    path = token_file(tmp_path, content, mode)
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path), "--inference-token-file", str(path)],
        env=CLEAN,
    )
    assert result.exit_code == 2
    assert f"error: --inference-token-file: '{path}'" in result.output
    assert expected in result.output


def test_a_missing_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path), "--management-token-file", str(missing)],
        env=CLEAN,
    )
    assert result.exit_code == 2
    assert f"error: --management-token-file: cannot read '{missing}'" in result.output


def test_a_token_given_both_ways_stops_the_start(tmp_path: Path) -> None:
    path = token_file(tmp_path, b"secret\n")
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path), "--inference-token-file", str(path)],
        env={**CLEAN, "INFERPLEX_INFERENCE_TOKEN": "other"},
    )
    assert result.exit_code == 2
    assert "--inference-token and --inference-token-file both give" in result.output
    assert "secret" not in result.output.replace("--inference-token", "")
