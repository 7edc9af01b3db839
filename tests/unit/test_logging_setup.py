"""Log formats and levels (logging_setup.py)."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from inferplex.cli.main import main
from inferplex.logging_setup import configure_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = logging.getLogger("inferplex").level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("inferplex").setLevel(ours)


def test_json_lines_carry_the_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    log = logging.getLogger("inferplex.test")
    log.info("model '%s' READY", "m", extra={"model": "m", "state": "READY", "versions": [1]})
    log.debug("not shown at info")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["message"] == "model 'm' READY" and first["level"] == "INFO"
    assert (first["model"], first["state"], first["versions"]) == ("m", "READY", [1])
    assert first["logger"] == "inferplex.test" and first["time"].endswith("+00:00")
    assert "ValueError: boom" in lines[1]["exception"]


def test_plain_lines_and_levels() -> None:
    stream = io.StringIO()
    configure_logging("warning", "plain", stream=stream)
    logging.getLogger("inferplex.x").info("hidden")
    logging.getLogger("inferplex.x").warning("shown %d", 1)
    logging.getLogger("some.library").info("libraries stay quiet below WARNING")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("WARNING inferplex.x: shown 1")


def test_a_bad_level_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="log level must be one of debug, info"):
        configure_logging("loud")


def test_the_cli_refuses_a_bad_level_from_the_environment(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path)],
        env={"INFERPLEX_LOG_LEVEL": "loud"},
    )
    assert result.exit_code == 2
    assert "error: log_level: log level must be one of" in result.output


def test_a_log_file_is_appended_to_in_iso8601(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text("kept\n")
    configure_logging("info", "iso8601", str(path))
    logging.getLogger("inferplex.x").info("to the file")
    configure_logging("info", "plain", stream=io.StringIO())  # closes the file's handler
    kept, line = path.read_text().splitlines()
    assert kept == "kept"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO inferplex.x: to the file", line)


def test_a_log_file_that_cannot_be_opened_stops_the_start(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["serve", "--model-repository", str(tmp_path), f"--log-file={tmp_path / 'no' / 'x'}"],
    )
    assert result.exit_code == 2
    assert "error: log_file: cannot open" in result.output
