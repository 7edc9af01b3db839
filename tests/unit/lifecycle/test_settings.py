"""The lifecycle's server settings: flags, environment variables, byte sizes."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig


def test_memory_limit_takes_units(tmp_path: Path) -> None:
    assert ServerConfig(model_repository=tmp_path, memory_limit="2GiB").memory_limit == 2 << 30
    assert ServerConfig(model_repository=tmp_path, memory_limit="1.5GB").memory_limit == 15 * 10**8
    assert ServerConfig(model_repository=tmp_path).memory_limit == 0


def test_load_model_is_a_list(tmp_path: Path, monkeypatch) -> None:
    config = ServerConfig(model_repository=tmp_path, load_model=["a", "b"])
    assert config.load_model == ("a", "b")
    # in the environment: one name, names with commas, or a JSON list
    for value, names in (("a", ("a",)), ("a, b,", ("a", "b")), ('["a", "b"]', ("a", "b"))):
        monkeypatch.setenv("INFERPLEX_LOAD_MODEL", value)
        assert ServerConfig(model_repository=tmp_path).load_model == names


def test_bad_lifecycle_flags_name_the_field(tmp_path: Path) -> None:
    base = ["serve", "--model-repository", str(tmp_path)]
    result = CliRunner().invoke(main, [*base, "--memory-limit", "lots"])
    assert result.exit_code == 2 and "memory_limit" in result.output
    result = CliRunner().invoke(main, [*base, "--repository-poll-secs", "0"])
    assert result.exit_code == 2 and "repository_poll_secs" in result.output
    result = CliRunner().invoke(main, [*base, "--model-control-mode", "sometimes"])
    assert result.exit_code == 2 and "'sometimes' is not one of" in result.output
    result = CliRunner().invoke(
        main,
        base,
        env={"INFERPLEX_MODEL_CONTROL_MODE": "explicit", "INFERPLEX_IDLE_UNLOAD_SECS": "-1"},
    )
    assert result.exit_code == 2 and "idle_unload_secs" in result.output


def test_load_share_is_a_share_of_the_time(tmp_path: Path) -> None:
    assert ServerConfig(model_repository=tmp_path).load_share == 0.05
    assert ServerConfig(model_repository=tmp_path, load_share=1).load_share == 1.0
    base = ["serve", "--model-repository", str(tmp_path)]
    for bad in ("0", "1.5"):
        result = CliRunner().invoke(main, [*base, "--load-share", bad])
        assert result.exit_code == 2 and "load_share" in result.output
