"""``inferplex encrypt --new-key``: the key file is created readable by its owner alone (0600)
from its first byte, whatever the umask; an existing key is never overwritten unless asked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from examples.modelgen import add_sub
from inferplex.cli.main import main
from inferplex.errors import ConfigError
from inferplex.security import encryption
from inferplex.security.encryption import load_key, write_new_key


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: a file created with the default mode would be world-readable."""
    previous = os.umask(0)
    yield
    os.umask(previous)


@pytest.fixture
def no_chmod(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mode set after the file exists comes too late: the file was readable meanwhile."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the key file's mode was changed after it was created")

    monkeypatch.setattr(os, "chmod", refuse)
    monkeypatch.setattr(os, "fchmod", refuse)
    monkeypatch.setattr(Path, "chmod", refuse)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.usefixtures("open_umask", "no_chmod")
def test_the_key_file_is_created_0600(tmp_path: Path) -> None:
    # with umask 0 and no chmod allowed, the mode seen now is the mode it was created with
    path = tmp_path / "model.key"
    key = write_new_key(path)
    assert mode(path) == 0o600
    assert load_key(key_file=path) == key and len(key) == encryption.KEY_BYTES


def test_a_narrower_umask_is_kept(tmp_path: Path) -> None:
    previous = os.umask(0o277)
    try:
        write_new_key(tmp_path / "model.key")
    finally:
        os.umask(previous)
    assert mode(tmp_path / "model.key") == 0o400  # never wider than 0600


@pytest.mark.usefixtures("open_umask", "no_chmod")
def test_the_cli_creates_it_0600_and_encrypts_with_it(tmp_path: Path) -> None:
    add_sub(tmp_path)
    model = tmp_path / "add_sub" / "1" / "model.onnx"
    plain = model.read_bytes()
    key_file = tmp_path / "model.key"
    result = CliRunner().invoke(
        main, ["encrypt", str(model), "--new-key", "--key-file", str(key_file)]
    )
    assert result.exit_code == 0, result.output
    assert mode(key_file) == 0o600
    assert encryption.decrypt_bytes(model.read_bytes(), load_key(key_file=key_file), "m") == plain


def test_an_existing_key_is_not_overwritten_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "model.key"
    first = write_new_key(path)
    with pytest.raises(ConfigError, match="exists: refusing to overwrite a key"):
        write_new_key(path)
    assert load_key(key_file=path) == first
    link = tmp_path / "link.key"
    link.symlink_to(tmp_path / "elsewhere.key")  # a dangling link is not followed
    with pytest.raises(ConfigError, match="exists"):
        write_new_key(link)
    assert not (tmp_path / "elsewhere.key").exists()
    second = write_new_key(path, overwrite=True)
    assert second != first and load_key(key_file=path) == second
    assert mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.key", "model.key"]


def test_the_cli_refuses_to_overwrite_and_names_the_flag(tmp_path: Path) -> None:
    add_sub(tmp_path)
    model = tmp_path / "add_sub" / "1" / "model.onnx"
    key_file = tmp_path / "model.key"
    key_file.write_text("a" * 64 + "\n")
    args = ["encrypt", str(model), "--new-key", "--key-file", str(key_file)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--overwrite-key" in result.output
    assert key_file.read_text() == "a" * 64 + "\n"
    result = CliRunner().invoke(main, ["encrypt", str(model), "--overwrite-key"])
    assert result.exit_code == 2 and "--overwrite-key goes with --new-key" in result.output
    result = CliRunner().invoke(main, [*args, "--overwrite-key"])
    assert result.exit_code == 0, result.output
    assert key_file.read_text() != "a" * 64 + "\n" and mode(key_file) == 0o600


def test_a_key_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot write the key to"):
        write_new_key(tmp_path / "no-such-folder" / "model.key")
