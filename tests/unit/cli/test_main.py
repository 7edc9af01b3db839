from click.testing import CliRunner

from inferplex.cli.main import main


def test_missing_repository_is_a_clear_error() -> None:
    result = CliRunner().invoke(main, ["serve"], env={"INFERPLEX_MODEL_REPOSITORY": ""})
    assert result.exit_code == 2


def test_bad_setting_names_the_field() -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", "m", "--http-port", "70000"]
    )
    assert result.exit_code == 2
    assert "http_port" in result.output


def test_rate_limit_resources_must_be_a_json_object() -> None:
    result = CliRunner().invoke(
        main, ["serve", "--model-repository", "m", "--rate-limit-resources", "[1]"]
    )
    assert result.exit_code == 2
    assert "expected a JSON object" in result.output


def test_environment_fills_what_flags_leave_out() -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", "m"],
        env={"INFERPLEX_SCHEDULING_POLICY": "fastest"},
    )
    assert result.exit_code == 2
    assert "scheduling_policy" in result.output
