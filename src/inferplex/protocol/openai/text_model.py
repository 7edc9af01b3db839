"""What the server reads of a generative model's folder to serve it the OpenAI way: its
tokenizer (``tokenizer.json``, read with ``tokenizers``), its chat template
(``chat_template`` in ``tokenizer_config.json`` or a ``chat_template.jinja`` file), its
special tokens and its context length. Looked for in the model's folder, then in its version
folders, highest first (a Hugging Face folder is often copied into ``1/``).

The context length is the config parameter ``context_length`` where the model's config has
one, else ``max_position_embeddings`` (or ``n_positions``) of the folder's ``config.json``,
else the tokenizer's ``model_max_length``; unknown, prompts are not checked against it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferplex.errors import ConfigError

_SPECIAL = (
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
)
#: a text's words and punctuation marks: the token estimate of a model without a tokenizer
WORDS = re.compile(r"\w+|[^\w\s]")
#: a tokenizer_config model_max_length at or above this means "no limit" (transformers' 1e30)
_NO_LIMIT = 10**9


@dataclass(slots=True)
class TextModel:
    """A model's tokenizer, chat template, special tokens and context length, each None /
    empty where its folder has none."""

    tokenizer: Any = None  # tokenizers.Tokenizer
    template: Any = None  # jinja2.Template (jinja2 is imported only where a model has one)
    special: dict[str, Any] = field(default_factory=dict)
    context_length: int | None = None
    #: where the files were found (for messages)
    folder: Path | None = None

    def count(self, text: str, special_tokens: bool = True) -> int | None:
        """Tokens in ``text`` by the model's tokenizer; None without one."""
        if self.tokenizer is None:
            return None
        return len(self.tokenizer.encode(text, add_special_tokens=special_tokens).ids)

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The prompt of ``messages`` by the model's chat template (it has one)."""
        from inferplex.protocol.openai.template import render

        return render(self.template, messages, self.special)

    def decode(self, ids: list[int]) -> str | None:
        if self.tokenizer is None:
            return None
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


def read_text_model(folder: Path | None, context_parameter: str | None) -> TextModel:
    """The text model of the files in ``folder`` (in a worker thread: it reads files)."""
    model = TextModel()
    if context_parameter:
        model.context_length = _context(context_parameter)
    if folder is None or not folder.is_dir():
        return model
    for place in _places(folder):
        if (place / "tokenizer.json").is_file() or (place / "tokenizer_config.json").is_file():
            _read_into(model, place)
            break
    return model


def _tokenizer(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(
            f"{path} needs the tokenizers package (pip install 'inferplex[openai]')"
        ) from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception for a bad file
        raise ConfigError(f"{path} is not a tokenizer file: {exc}") from None


def _context(value: str) -> int:
    try:
        length = int(value)
    except ValueError:
        length = 0
    if length < 1:
        raise ConfigError(f"parameter 'context_length' must be a positive integer, got {value!r}")
    return length


def _places(folder: Path) -> list[Path]:
    versions = sorted(
        (p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()),
        key=lambda p: int(p.name),
        reverse=True,
    )
    return [folder, *versions]


def _read_into(model: TextModel, place: Path) -> None:
    model.folder = place
    if (place / "tokenizer.json").is_file():
        model.tokenizer = _tokenizer(place / "tokenizer.json")
    settings = _json(place / "tokenizer_config.json")
    for name in _SPECIAL:
        value = settings.get(name)
        if isinstance(value, dict):  # an AddedToken written out
            value = value.get("content")
        if isinstance(value, str):
            model.special[name] = value
    source = _template_source(place, settings)
    if source is not None:
        model.template = _compiled(source, place)
    if model.context_length is None:
        model.context_length = _context_of(_json(place / "config.json"), settings)


def _compiled(source: str, place: Path) -> Any:
    try:
        from jinja2.exceptions import TemplateError

        from inferplex.protocol.openai.template import compile_template
    except ImportError:
        raise ConfigError(
            f"{place} has a chat template: serving it needs jinja2 (pip install "
            "'inferplex[openai]')"
        ) from None
    try:
        return compile_template(source)
    except TemplateError as exc:
        raise ConfigError(f"the chat template in {place} is not valid Jinja: {exc}") from None


def _template_source(place: Path, settings: dict[str, Any]) -> str | None:
    jinja = place / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = settings.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _context_of(config: dict[str, Any], settings: dict[str, Any]) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    value = settings.get("model_max_length")
    if isinstance(value, int | float) and 0 < value < _NO_LIMIT:
        return int(value)
    return None


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    return document if isinstance(document, dict) else {}
