"""Chat templates render as transformers renders them: trim_blocks and lstrip_blocks, the
loopcontrols extension, raise_exception as a 400 on 'messages', tojson keeping non-ASCII
text, the {% generation %} block, special tokens as variables; compared with transformers'
own apply_chat_template where it is installed."""

from __future__ import annotations

import pytest

from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.openai.template import compile_template, render

TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}\n"
    "  {% if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('system comes first') }}{% endif %}\n"
    "  {% if message['role'] == 'tool' %}{% continue %}{% endif %}\n"
    "<{{ message['role'] }}>{% generation %}{{ message['content'] }}{% endgeneration %}\n"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "tool", "content": "skipped"},
    {"role": "user", "content": "héllo"},
]


def test_blocks_are_trimmed_and_loops_controlled() -> None:
    prompt = render(compile_template(TEMPLATE), MESSAGES, {"bos_token": "<s>"})
    # trim_blocks eats the newline after each block tag, lstrip_blocks the indent before
    assert prompt == "<s><system>be brief<user>héllo<assistant>"


def test_raise_exception_is_a_400_on_messages() -> None:
    with pytest.raises(FieldError) as refused:
        render(compile_template(TEMPLATE), [*MESSAGES, MESSAGES[0]], {"bos_token": ""})
    assert refused.value.param == "messages"
    assert "system comes first" in refused.value.message


def test_tojson_keeps_non_ascii_text() -> None:
    template = compile_template("{{ messages | tojson }}")
    assert render(template, [{"role": "user", "content": "é"}], {}) == (
        '[{"role": "user", "content": "é"}]'
    )


def test_the_sandbox_refuses_unsafe_access() -> None:
    template = compile_template("{{ messages.__class__.__mro__ }}")
    with pytest.raises(FieldError):
        render(template, MESSAGES, {})


def test_same_prompt_as_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    model = tokenizers.models.WordLevel({"<unk>": 0, "<s>": 1}, unk_token="<unk>")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(model), bos_token="<s>", unk_token="<unk>"
    )
    fast.chat_template = TEMPLATE
    expected = fast.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ours = render(compile_template(TEMPLATE), MESSAGES, {"bos_token": "<s>", "unk_token": "<unk>"})
    assert ours == expected
