"""Chat templates rendered as transformers renders them (``apply_chat_template``): Jinja in
an immutable sandbox with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols``
extension, ``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII text, the
``{% generation %}`` block, and the tokenizer's special tokens as variables."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from inferplex.protocol.openai.errors import FieldError


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}``: marks the assistant's part for
    transformers' masks; rendered as its body here."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def compile_template(source: str) -> jinja2.Template:
    """The template of ``source``; ConfigError-like ValueError for one Jinja cannot read."""
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, "jinja2.ext.loopcontrols"]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment.from_string(source)


def render(
    template: jinja2.Template, messages: list[dict[str, Any]], special: dict[str, Any]
) -> str:
    """The prompt of ``messages`` with the generation prompt added; a template that refuses
    them (``raise_exception``) or fails is a 400 on ``messages`` in its own words."""
    try:
        return template.render(
            messages=messages,
            add_generation_prompt=True,
            tools=None,
            documents=None,
            **special,
        )
    except jinja2.exceptions.TemplateError as exc:
        raise FieldError(
            "messages", f"the model's chat template refused the messages: {exc}"
        ) from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise FieldError(
            "messages", f"the model's chat template failed on the messages: {exc}"
        ) from None
