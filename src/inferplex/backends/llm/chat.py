"""A model folder's chat template (``chat_template`` of tokenizer_config.json, or the
``chat_template.jinja`` file transformers 5 writes), rendered with Jinja2 in a sandbox as
Hugging Face renders it: messages in, the prompt text out. For the OpenAI-compatible
frontend, which sends the rendered prompt as ``text_input``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferplex.errors import ConfigError, InvalidInputError


class ChatTemplate:
    """A compiled chat template with the folder's special tokens."""

    def __init__(self, source: str, special_tokens: Mapping[str, str]) -> None:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise
        try:
            self._template = environment.from_string(source)
        except TemplateError as exc:
            raise ConfigError(f"the model's chat template does not compile: {exc}") from exc
        self._special = dict(special_tokens)

    @classmethod
    def from_folder(cls, folder: Path) -> ChatTemplate | None:
        """The folder's template, or None when it has none."""
        config = _json(folder / "tokenizer_config.json")
        source = config.get("chat_template")
        jinja = folder / "chat_template.jinja"
        if source is None and jinja.exists():
            source = jinja.read_text()
        if isinstance(source, list):  # named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if not isinstance(source, str):
            return None
        special = {
            name: value["content"] if isinstance(value, dict) else value
            for name in ("bos_token", "eos_token", "pad_token", "unk_token")
            if isinstance(value := config.get(name), str | dict)
        }
        return cls(source, special)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """The prompt of ``messages`` (InvalidInputError when the template refuses them)."""
        from jinja2 import TemplateError

        try:
            return str(
                self._template.render(
                    messages=list(messages),
                    add_generation_prompt=add_generation_prompt,
                    **self._special,
                    **variables,
                )
            )
        except TemplateError as exc:
            raise InvalidInputError(
                f"the model's chat template refused the messages: {exc}"
            ) from None


def _raise(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return value if isinstance(value, dict) else {}
