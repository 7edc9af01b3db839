"""A config's problems as one line each: pydantic's errors told in the file's own field
paths (``input[0].dims``, ``parameters[key]``), values shown short and on one line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError


def show(value: Any) -> str:
    """A value as a message shows it: its repr, cut short past 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(exc: ValidationError, source: str) -> str:
    """One line per pydantic error: file, field path in the file's own names, expectation."""
    lines = []
    for err in exc.errors():
        path = file_path(err["loc"])
        if err["type"] == "missing":
            problem = "is required"
        elif err["type"] == "value_error":
            problem = err["msg"].removeprefix("Value error, ")
        else:
            problem = err["msg"].replace("Input should be", "expected", 1)
            problem += f", got {show(err['input'])}"
        lines.append(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")
    return "\n".join(lines)


def key_text(key: int | str) -> str:
    """A map key as shown in a message: quoted when it holds line breaks or control characters,
    so every message stays one line per problem."""
    return repr(key) if isinstance(key, str) and not key.isprintable() else str(key)


def file_path(loc: Sequence[int | str]) -> str:
    """ModelConfig's error location as the path of the field in the file."""
    text = ""
    previous: int | str | None = None
    for item in loc:
        if item == "[key]":
            text += ".key"
        elif isinstance(item, int) or previous in ("parameters", "priority_queue_policy"):
            text += f"[{key_text(item)}]"
        else:
            if previous == "version_policy":  # ModelConfig flattens the oneof
                item = {"num_versions": "latest.num_versions", "versions": "specific.versions"}.get(
                    str(item), item
                )
            text += f".{item}" if text else str(item)
            if item == "reshape":
                text += ".shape"
        previous = item
    return text
