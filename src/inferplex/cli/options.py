"""``inferplex serve``'s flags, built from ServerConfig's fields.

A setting is written once, as a ServerConfig field: its type, default and description. Here
each field ``some_name`` becomes the flag ``--some-name`` with that description as its help
and that default shown beside it; what the flag takes follows the field's type:

- ``Literal[...]`` (or a :class:`FlagChoices` marker): one of the values, in any case;
- ``bool``: a switch that turns the setting on;
- ``int``, ``float``: a number; ``tuple[str, ...]``: a repeatable flag;
- ``dict[str, int]``: a JSON object;
- anything else (text, paths, sizes such as ``2GiB``, tokens, the ``NoDecode`` fields that
  parse their own text): text, which ServerConfig reads.

A field marked :class:`NoFlag` has no flag. A flag left out passes nothing, so the field's
INFERPLEX_* variable or its default applies; ServerConfig checks the result once.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import click
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode

from inferplex.config.server_config import FlagChoices, NoFlag, OneValue, ServerConfig

F = TypeVar("F", bound=Callable[..., Any])
_MIB = 1024 * 1024


class JsonObject(click.ParamType):
    """A flag whose value is a JSON object."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"not valid JSON: {exc}", param, ctx)
        if not isinstance(parsed, dict):
            self.fail('expected a JSON object such as {"R1": 4}', param, ctx)
        return parsed


def flag_fields() -> dict[str, FieldInfo]:
    """The ServerConfig fields that have a flag, in their order."""
    return {
        name: field
        for name, field in ServerConfig.model_fields.items()
        if NoFlag not in field.metadata
    }


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def server_options(command: F) -> F:
    """Add one click option per ServerConfig field with a flag to ``command``; each passes
    None (or () when repeatable) when not given."""
    # click lists options in the order of the decorators as written, i.e. the reverse of the
    # order they are applied in
    for name, field in reversed(flag_fields().items()):
        command = click.option(flag_name(name), name, **option_settings(name, field))(command)
    return command


def option_settings(name: str, field: FieldInfo) -> dict[str, Any]:
    """The click.option arguments of one field's flag."""
    kind = _without_none(field.annotation)
    # the default in the help text: click's own would pass it on, hiding INFERPLEX_<NAME>
    settings: dict[str, Any] = {"help": f"{field.description}  [{shown_default(name, field)}]"}
    choices = next((m.values for m in field.metadata if isinstance(m, FlagChoices)), None)
    if choices is None and get_origin(kind) is Literal:
        choices = tuple(str(value) for value in get_args(kind))
    if choices is not None:
        # in any case, as tritonserver reads its choices (--model-control-mode=EXPLICIT)
        settings["type"] = click.Choice(choices, case_sensitive=False)
    elif kind is bool:
        settings.update(is_flag=True, default=None)
    elif kind in (int, float):
        settings["type"] = kind
    elif get_origin(kind) is tuple:
        settings.update(multiple=True, help="repeatable: " + settings["help"])
    elif get_origin(kind) is dict and NoDecode not in field.metadata:
        settings["type"] = JsonObject()
    else:
        # str, Path (an s3:// URL too, which click.Path would mangle), ByteSize, SecretStr
        settings.update(type=str, metavar="PATH" if kind is Path else "TEXT")
    once = next((m for m in field.metadata if isinstance(m, OneValue)), None)
    if once is not None:  # read every time it is given, to refuse two values
        settings.update(multiple=True, callback=functools.partial(_one_value, once.why))
    return settings


def _one_value(why: str, ctx: click.Context, param: click.Parameter, given: tuple[Any, ...]) -> Any:
    """The one value of a flag given once (or the same each time); None if not given."""
    if len(set(given)) > 1:
        raise click.BadParameter(f"given {len(given)} times ({', '.join(given)}): {why}")
    return given[0] if given else None


def shown_default(name: str, field: FieldInfo) -> str:
    """``default: ...`` as ``--help`` shows it (``none`` for an empty one), or
    ``required``."""
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if value is None or value in ("", (), {}):
        shown = "none"
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif name.endswith("_bytes") and isinstance(value, int) and value and value % _MIB == 0:
        shown = f"{value} = {value // _MIB} MiB"
    else:
        shown = str(value)
    return f"default: {shown}"


def _without_none(annotation: Any) -> Any:
    """``X | None`` -> X (a flag cannot say None: leaving it out does)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return _without_none(args[0])
    if hasattr(annotation, "__metadata__"):  # Annotated[X, ...] inside an Optional
        return get_args(annotation)[0]
    return annotation
