import socket
from pathlib import Path

from click.testing import CliRunner

from inferplex.cli.main import main


def test_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve"], env={"INFERPLEX_MODEL_REPOSITORY": None})
    assert result.exit_code == 2
    assert "model_repository: Field required" in result.output
    result = CliRunner().invoke(main, ["serve", "--model-repository", str(tmp_path / "no")])
    assert result.exit_code == 2
    assert "model_repository" in result.output


def test_bad_setting_names_the_field(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", str(tmp_path), "--http-port", "70000"]
    )
    assert result.exit_code == 2
    assert "http_port" in result.output


def test_rate_limit_resources_must_be_a_json_object(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", str(tmp_path), "--rate-limit-resources", "[1]"]
    )
    assert result.exit_code == 2
    assert "expected a JSON object" in result.output


def test_environment_fills_what_flags_leave_out(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path)],
        env={"INFERPLEX_SCHEDULING_POLICY": "fastest"},
    )
    assert result.exit_code == 2
    assert "scheduling_policy" in result.output


def test_environment_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path)],
        env={"INFERPLEX_RATE_LIMIT_RESOURCES": "notjson"},
    )
    assert result.exit_code == 2
    assert 'error parsing value for field "rate_limit_resources"' in result.output
    assert "Traceback" not in result.output


def test_a_taken_port_fails_before_any_model_loads(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()  # a model that would log its load failure
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main,
            ["serve", "--model-repository", str(tmp_path), "--grpc-port", str(port)],
            env={"INFERPLEX_HTTP_PORT": "0", "INFERPLEX_METRICS_PORT": "0"},
        )
    assert result.exit_code == 2
    assert f"error: cannot listen for gRPC on 127.0.0.1:{port}" in result.output
    assert "broken" not in result.output
