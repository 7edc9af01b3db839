"""The chat template of a model folder, rendered as Hugging Face renders it (compared with
transformers' own apply_chat_template), list-form content, a template that refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplex.backends.llm.chat import ChatTemplate
from inferplex.errors import InvalidInputError

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}]},
]


def test_the_folders_template_renders_as_transformers_does(llm_repository: Path) -> None:
    transformers = pytest.importorskip("transformers")
    folder = llm_repository / "tiny_llama" / "1"
    template = ChatTemplate.from_folder(folder)
    assert template is not None
    expected = transformers.AutoTokenizer.from_pretrained(folder).apply_chat_template(
        MESSAGES, tokenize=False, add_generation_prompt=True
    )
    assert template.render(MESSAGES) == expected
    assert template.render(MESSAGES).endswith("<|im_start|>assistant\n")


def test_a_folder_without_a_template_has_none(tmp_path: Path) -> None:
    assert ChatTemplate.from_folder(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert ChatTemplate.from_folder(tmp_path) is None


def test_a_template_that_refuses_is_an_invalid_input(tmp_path: Path) -> None:
    source = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": source, "bos_token": {"content": "<s>"}})
    )
    template = ChatTemplate.from_folder(tmp_path)
    assert template is not None
    with pytest.raises(InvalidInputError, match="user first"):
        template.render(MESSAGES)
