"""What the OpenAI codec reads of a model's folder: tokenizer, chat template (a .jinja file
first, a named 'default' template, tokenizer_config's), special tokens, context length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.modelgen.text import write_tokenizer
from inferplex.errors import ConfigError
from inferplex.protocol.openai.text_model import read_text_model


def test_files_in_a_version_folder_and_the_jinja_file_first(tmp_path: Path) -> None:
    version = tmp_path / "3"
    write_tokenizer(version, 64)
    (version / "chat_template.jinja").write_text("{{ bos_token }}{{ messages[0]['content'] }}")
    model = read_text_model(tmp_path, None)
    assert model.folder == version and model.context_length == 64
    assert model.render([{"role": "user", "content": "hi"}]) == "<s>hi"
    assert model.count("hello world .") == 3


def test_named_templates_and_the_context_parameter(tmp_path: Path) -> None:
    write_tokenizer(tmp_path, 64)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    settings["chat_template"] = [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "plain {{ messages | length }}"},
    ]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(settings))
    (tmp_path / "config.json").unlink()
    model = read_text_model(tmp_path, "100")
    assert model.render([{"role": "user", "content": "x"}]) == "plain 1"
    assert model.context_length == 100


def test_no_files_and_bad_files(tmp_path: Path) -> None:
    empty = read_text_model(tmp_path, None)
    assert empty.tokenizer is None and empty.template is None and empty.count("a b") is None
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{% if %}"}')
    with pytest.raises(ConfigError, match="not valid Jinja"):
        read_text_model(tmp_path, None)
    with pytest.raises(ConfigError, match="context_length"):
        read_text_model(None, "-1")
