"""`inferplex serve`'s flags come from ServerConfig's fields: every field has its flag (or is
marked as environment-only), each flag's help and default are its field's, and a flag, its
INFERPLEX_* variable and the default keep their order of precedence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from inferplex.cli import options
from inferplex.cli.main import main
from inferplex.cli.triton_flags import FLAGS
from inferplex.config.server_config import NoFlag, ServerConfig

SERVE: click.Command = main.commands["serve"]
#: fields set through the environment only (or derived by ServerConfig itself)
ENVIRONMENT_ONLY = {
    "enable_http",
    "enable_grpc",
    "enable_metrics",
    "auto_complete_config",
    "exit_on_error",
    "model_repository_url",
    "server_name",
    "strict_readiness",
    "gpu_metrics",
}
#: the tritonserver flags beside the fields' own (cli/triton_flags.py, test_triton_flags.py)
TRITON = {flag.param for flag in FLAGS}


def _option(name: str) -> click.Option:
    (option,) = (p for p in SERVE.params if p.name == name)
    assert isinstance(option, click.Option)
    return option


def test_every_field_has_a_flag_and_every_flag_a_field() -> None:
    fields = ServerConfig.model_fields
    flags = [p.name for p in SERVE.params if p.name not in TRITON]
    assert flags == [name for name in fields if name not in ENVIRONMENT_ONLY]
    assert {name for name, field in fields.items() if NoFlag in field.metadata} == (
        ENVIRONMENT_ONLY
    )
    for name in flags:
        assert _option(name).opts == ["--" + name.replace("_", "-")]


@pytest.mark.parametrize("name", list(options.flag_fields()))
def test_help_and_default_are_the_fields_own(name: str) -> None:
    field = ServerConfig.model_fields[name]
    option = _option(name)
    assert option.help is not None and field.description
    assert field.description in option.help
    assert option.help.endswith(f"[{options.shown_default(name, field)}]")


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("http_port", "default: 8000"),
        ("host", "default: 127.0.0.1"),
        ("max_request_bytes", "default: 268435456 = 256 MiB"),
        ("inline_execution_us", "default: 40.0"),
        ("allow_shared_memory", "default: off"),
        ("rate_limit_resources", "default: none"),
        ("worker_env", "default: none"),
        ("model_repository", "required"),
        ("log_level", "default: info"),
    ],
)
def test_defaults_as_shown(name: str, shown: str) -> None:
    assert options.shown_default(name, ServerConfig.model_fields[name]) == shown


def test_help_lists_every_flag_with_its_default() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    # each option's block: its line and the indented lines of help under it
    blocks: dict[str, str] = {}
    for line in result.output.split("Options:")[1].splitlines():
        if line.startswith("  --"):
            flag = line.split()[0]
            blocks[flag] = line
        elif blocks:
            blocks[flag] += " " + line.strip()
    ours = [options.flag_name(name) for name in options.flag_fields()]
    assert list(blocks) == ours + [flag.name for flag in FLAGS] + ["--help"]
    for name, field in options.flag_fields().items():
        block = " ".join(blocks[options.flag_name(name)].split())
        assert f"[{options.shown_default(name, field)}]" in block, block


@pytest.mark.parametrize(
    ("name", "kind", "extra"),
    [
        ("http_port", click.INT, {}),
        ("inline_execution_us", click.FLOAT, {}),
        ("http_server", click.Choice, {"choices": ("builtin", "uvicorn")}),
        ("log_level", click.Choice, {"choices": ("debug", "info", "warning", "error")}),
        ("rate_limit_resources", options.JsonObject, {}),
        ("memory_limit", click.STRING, {}),  # "2GiB": ServerConfig reads sizes
        ("gpu_memory_limit", click.STRING, {}),  # "0=8GiB,1=4GiB": its validator reads it
        ("model_repository", click.STRING, {}),  # s3:// URLs too
        ("tls_cert_file", click.STRING, {}),
        ("inference_token", click.STRING, {}),
    ],
)
def test_what_each_flag_takes_follows_the_fields_type(name: str, kind: Any, extra: dict) -> None:
    option = _option(name)
    if isinstance(kind, type):
        assert isinstance(option.type, kind)
    else:
        assert option.type == kind
    for attribute, value in extra.items():
        assert tuple(getattr(option.type, attribute)) == value


def test_switches_and_repeatable_flags() -> None:
    assert _option("allow_shared_memory").is_flag
    assert _option("load_on_demand").is_flag
    assert _option("worker_env").multiple and _option("load_model").multiple
    assert _option("load_model").help.startswith("repeatable: ")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """The ServerConfig `serve` would start a server with."""
    configs: list[ServerConfig] = []

    class FakeServer:
        def __init__(self, config: ServerConfig) -> None:
            configs.append(config)

        async def serve_forever(self) -> None:
            return None

    monkeypatch.setattr("inferplex.server.Server", FakeServer)
    monkeypatch.setattr("inferplex.cli.main.configure_logging", lambda *args: None)
    return configs


def test_flags_then_environment_then_defaults(served: list[ServerConfig], tmp_path: Path) -> None:
    args = ["serve", "--model-repository", str(tmp_path), "--http-port", "9000"]
    args += ["--load-model", "a", "--load-model", "b", "--allow-shared-memory"]
    args += ["--rate-limit-resources", '{"R1": 4}', "--memory-limit", "2GiB"]
    env = {"INFERPLEX_HTTP_PORT": "9999", "INFERPLEX_GRPC_PORT": "9001"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    (config,) = served
    assert (config.http_port, config.grpc_port, config.metrics_port) == (9000, 9001, 8002)
    assert config.load_model == ("a", "b")
    assert config.allow_shared_memory is True
    assert config.rate_limit_resources == {"R1": 4}
    assert config.memory_limit == 2 * 1024**3


def test_a_repeatable_flag_left_out_keeps_its_environment_variable(
    served: list[ServerConfig], tmp_path: Path
) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path)],
        env={"INFERPLEX_LOAD_MODEL": "a,b", "INFERPLEX_ALLOW_SHARED_MEMORY": "true"},
    )
    assert result.exit_code == 0, result.output
    assert served[0].load_model == ("a", "b")
    assert served[0].allow_shared_memory is True


def test_a_choice_flag_refuses_other_values(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", str(tmp_path), "--log-level", "loud"]
    )
    assert result.exit_code == 2
    assert "Invalid value for '--log-level'" in result.output
