"""`inferplex serve` takes the tritonserver flags of Triton start scripts: each sets its
ServerConfig field, or is accepted and says (in --help and the log) why it has no effect."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex.cli.triton_flags import FLAGS
from inferplex.config.server_config import ServerConfig
from tests.unit.cli.conftest import serve


def test_a_triton_start_script_line_sets_the_same_settings(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve(
        f"--model-repository={tmp_path}",
        "--strict-model-config=false",
        "--log-verbose=1",
        "--http-port=9000",
        "--grpc-port=9001",
        "--metrics-port=9002",
        "--model-control-mode=explicit",
        "--load-model=a",
        "--load-model=b",
        "--allow-grpc=false",
        "--allow-http=true",
        "--allow-metrics=0",
        "--exit-on-error=false",
        "--backend-config=onnxruntime,default-max-batch-size=4",
    )
    assert result.exit_code == 0, result.output
    (config,) = started
    assert config.model_repository == tmp_path
    assert (config.http_port, config.grpc_port, config.metrics_port) == (9000, 9001, 9002)
    assert (config.model_control_mode, config.load_model) == ("explicit", ("a", "b"))
    assert (config.enable_http, config.enable_grpc, config.enable_metrics) == (True, False, False)
    assert config.auto_complete_config and config.log_level == "debug"
    assert not config.exit_on_error


def test_exit_on_error_is_the_setting_of_that_name(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve("--model-repository", str(tmp_path), "--exit-on-error=true")
    assert result.exit_code == 0, result.output
    assert started[0].exit_on_error


@pytest.mark.parametrize(
    ("args", "auto_complete"),
    [
        ((), True),
        (("--strict-model-config=true",), False),
        (("--strict-model-config",), False),
        (("--strict-model-config", "False"), True),
        (("--disable-auto-complete-config",), False),
    ],
)
def test_auto_complete_config_follows_tritons_two_flags(
    tmp_path: Path, started: list[ServerConfig], args: tuple[str, ...], auto_complete: bool
) -> None:
    result = serve("--model-repository", str(tmp_path), *args)
    assert result.exit_code == 0, result.output
    assert started[0].auto_complete_config is auto_complete


def test_model_store_is_the_repository_and_inferplex_flags_win(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve(f"--model-store={tmp_path}", "--log-verbose=2", "--log-level=warning")
    assert result.exit_code == 0, result.output
    assert started[0].model_repository == tmp_path
    assert started[0].log_level == "warning"


def test_a_boolean_must_be_one_triton_reads(tmp_path: Path, started: list[ServerConfig]) -> None:
    result = serve("--model-repository", str(tmp_path), "--allow-grpc=maybe")
    assert result.exit_code == 2
    assert "--allow-grpc" in result.output and not started


def test_every_triton_flag_says_what_it_does_in_help() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    options = {p.name: p for p in main.commands["serve"].params}
    for flag in FLAGS:
        assert flag.name in result.output
        option = options[flag.param]
        assert isinstance(option, click.Option) and option.help
        assert option.help.startswith("[tritonserver]")
        if flag.sets is None:
            assert "no effect:" in option.help


def test_a_flag_without_effect_is_logged_with_its_reason(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", str(tmp_path), "--backend-config=python,x=1"]
    )
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.stderr.splitlines() if "--backend-config" in x]
    assert "(python,x=1)" in line and "no effect" in line


def test_listener_addresses_set_the_one_bind_address(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve(
        f"--model-repository={tmp_path}", "--http-address=127.0.0.2", "--grpc-address=127.0.0.2"
    )
    assert result.exit_code == 0, result.output
    assert started[0].host == "127.0.0.2"


def test_two_different_listener_addresses_are_an_error(
    tmp_path: Path, started: list[ServerConfig]
) -> None:
    result = serve(
        f"--model-repository={tmp_path}", "--http-address=127.0.0.2", "--grpc-address=127.0.0.3"
    )
    assert result.exit_code == 2 and not started
    assert "--grpc-address (127.0.0.3) and --http-address (127.0.0.2)" in result.output
