"""A worker process's environment is built from an allow-list: the server's secrets and
anything else its environment holds never reach a model's code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from inferplex.backends.worker import worker_process
from inferplex.backends.worker.worker_process import MALLOC_TUNABLES, pass_to_workers, worker_env
from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig

SECRETS = {
    "INFERPLEX_MANAGEMENT_TOKEN": "management-token",
    "INFERPLEX_INFERENCE_TOKEN": "inference-token",
    "INFERPLEX_MODEL_KEY": "ab" * 32,
    "INFERPLEX_MODEL_KEY_FILE": "/keys/model.key",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "CUDA_AUTH_TOKEN": "looks-like-a-secret",  # of a passed-on family, but named like one
    "LC_API_KEY": "looks-like-a-secret",
    "SOME_SETTING": "not listed",
}
PLAIN = {
    "PATH": "/usr/bin",
    "HOME": "/home/me",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/scratch",
    "CUDA_VISIBLE_DEVICES": "1",
    "CUDA_MODULE_LOADING": "LAZY",
}


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {**SECRETS, **PLAIN}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    yield
    pass_to_workers(())


def test_only_the_listed_variables_are_passed_on() -> None:
    env = worker_env(3)
    for name in SECRETS:
        assert name not in env, name
    assert not [name for name in env if name.startswith("INFERPLEX_")]
    for name, value in PLAIN.items():
        assert env[name] == value
    assert env["OMP_NUM_THREADS"] == "3" and env["GLIBC_TUNABLES"] == MALLOC_TUNABLES
    source = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert (source / "inferplex" / "__init__.py").is_file()  # the worker imports this package


def test_the_operator_adds_variables_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", "/models/hf")
    pass_to_workers(["HF_HOME", "SOME_SETTING", "NOT_SET_ANYWHERE"])
    env = worker_env(1)
    assert env["HF_HOME"] == "/models/hf" and env["SOME_SETTING"] == "not listed"
    assert "NOT_SET_ANYWHERE" not in env
    assert "INFERPLEX_MANAGEMENT_TOKEN" not in env
    pass_to_workers(())
    assert "HF_HOME" not in worker_env(1)


def test_the_setting_takes_names_and_refuses_the_servers_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in SECRETS:
        if name.startswith("INFERPLEX_"):
            monkeypatch.delenv(name)

    def config(**settings: object) -> ServerConfig:
        return ServerConfig(model_repository=str(tmp_path), **settings)

    assert config().worker_env == ()
    assert config(worker_env=["HF_HOME", "A_1"]).worker_env == ("HF_HOME", "A_1")
    monkeypatch.setenv("INFERPLEX_WORKER_ENV", "HF_HOME, TORCH_HOME")
    assert config().worker_env == ("HF_HOME", "TORCH_HOME")
    monkeypatch.delenv("INFERPLEX_WORKER_ENV")
    for bad, fragment in [
        (["INFERPLEX_MANAGEMENT_TOKEN"], "never passed to workers"),
        (["inferplex_model_key"], "never passed to workers"),
        (["A=B"], "not an environment variable name"),
        (["1X"], "not an environment variable name"),
    ]:
        with pytest.raises(ValidationError, match=fragment):
            config(worker_env=bad)


def test_the_flag_reaches_the_setting(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path), "--worker-env", "INFERPLEX_INFERENCE_TOKEN"],
        env={name: None for name in SECRETS if name.startswith("INFERPLEX_")},
    )
    assert result.exit_code == 2
    assert "worker_env" in result.output and "never passed to workers" in result.output


def test_module_default_is_empty() -> None:
    assert worker_process._extra == ()
