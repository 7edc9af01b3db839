"""Reading the fields of an OpenAI request body: each value checked for its kind and range,
an error naming the field (``param``) otherwise. Pure functions of JSON values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.v2.rest_json import json_type

Body = bytes | memoryview


def parse_body(body: Body, what: str) -> dict[str, Any]:
    """The JSON object of a request ``body``; FieldError for one that is not valid UTF-8 JSON
    (naming the field whose string is not UTF-8, where one is) or not an object."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _not_json(bytes(body), what, exc) from None
    if not isinstance(document, dict):
        raise FieldError(None, f"the {what} request must be a JSON object")
    return document


def _not_json(raw: bytes, what: str, exc: Exception) -> FieldError:
    """The error for a body orjson refused: invalid UTF-8 is named by the field it is in."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        field = _field_with_bad_bytes(raw)
        where = f"field '{field}'" if field else f"byte {bad.start}"
        return FieldError(
            field or None, f"the {what} request is not valid UTF-8: {where} has bytes that are not"
        )
    return FieldError(None, f"the {what} request is not valid JSON: {exc}")


def _field_with_bad_bytes(raw: bytes) -> str:
    """The path of the first string holding invalid UTF-8 (read again, its bad bytes kept as
    lone surrogates), or "" when the JSON cannot be read at all."""
    try:
        document = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return ""
    return _bad_path(document, "") or ""


def _bad_path(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if any("\udc80" <= c <= "\udcff" for c in value) else None
    items: Any = ()
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    for where, item in items:
        found = _bad_path(item, where)
        if found is not None:
            return found
    return None


def kind_error(name: str, expected: str, value: Any) -> FieldError:
    got = f"the number {value}" if type(value) in (int, float) else json_type(value)
    return FieldError(name, f"'{name}' must be {expected}, got {got}")


def text(fields: Mapping[str, Any], name: str, required: bool = False) -> str | None:
    value = fields.get(name)
    if value is None:
        if required:
            raise FieldError(name, f"'{name}' is required")
        return None
    if not isinstance(value, str):
        raise kind_error(name, "a string", value)
    return value


def flag(fields: Mapping[str, Any], name: str) -> bool | None:
    value = fields.get(name)
    if value is None or isinstance(value, bool):
        return value
    raise kind_error(name, "true or false", value)


def integer(
    fields: Mapping[str, Any], name: str, low: int | None = None, high: int | None = None
) -> int | None:
    """An integer in [low, high] (either bound open when None)."""
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise kind_error(name, "an integer", value)
    _check_range(name, value, low, high)
    return value


def number(
    fields: Mapping[str, Any], name: str, low: float | None = None, high: float | None = None
) -> float | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise kind_error(name, "a number", value)
    _check_range(name, value, low, high)
    return float(value)


def _check_range(name: str, value: float, low: float | None, high: float | None) -> None:
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            expected = f"at least {low}"
        elif low is None:
            expected = f"at most {high}"
        else:
            expected = f"between {low} and {high}"
        raise FieldError(name, f"'{name}' must be {expected}, got {value}")


def strings(fields: Mapping[str, Any], name: str, most: int) -> list[str]:
    """A string or a list of up to ``most`` non-empty strings (``stop``); [] when absent."""
    value = fields.get(name)
    if value is None:
        return []
    found = [value] if isinstance(value, str) else value
    if not isinstance(found, list) or not all(isinstance(s, str) and s for s in found):
        raise kind_error(name, "a non-empty string or an array of non-empty strings", value)
    if len(found) > most:
        raise FieldError(name, f"'{name}' may hold at most {most} sequences, got {len(found)}")
    return found


def unknown(fields: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    """FieldError for the first field of the request that this server does not know."""
    for name in fields:
        if name not in known:
            raise FieldError(
                name, f"unrecognized request argument supplied to the {what} API: '{name}'"
            )
