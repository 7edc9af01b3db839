"""The served form of a model config: what ``/v2/models/{m}/config`` and the gRPC
``ModelConfig`` answer.

Triton serves back every field of a config, also those it only passes to a backend; clients
read them (``image_client`` reads an input's ``format``, perf_analyzer ``model_transaction_policy``
and ``sequence_batching``). ModelConfig reads the fields this server honours; the others
would be lost. So the file's own fields are kept as written (:func:`json_form`: protobuf's
JSON form, checked against the compiled schema) and the served config is ModelConfig's
rendering laid over them (:func:`served`): what ModelConfig says wins (completed inputs, a
filled ``max_batch_size``, normalised names), the file fills in everything else, field by
field and item by item, and :data:`_SHOWN_ZEROS` fills what Triton always shows.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferplex.config.pbtxt import is_repeated, model_config_schema
from inferplex.datatypes import V2_TO_TRITON
from inferplex.errors import ConfigError

#: Fields Triton's JSON always shows that no ModelConfig field holds: shown at their zero
#: value when the file leaves them out. A list holds the template of each of its items.
_SHOWN_ZEROS: dict[str, Any] = {
    "input": [{"allow_ragged_batch": False}],
    "instance_group": [
        {"secondary_devices": [], "profile": [], "passive": False, "host_policy": ""}
    ],
    "ensemble_scheduling": {"step": [{"model_namespace": ""}]},
}


def json_form(raw: Mapping[str, Any], schema: Descriptor | None = None) -> dict[str, Any]:
    """A config as a reader gives it (pbtxt map entries, YAML's shorthands) in protobuf's JSON
    form, field names as in the schema: maps as mappings with string keys, enums by name,
    a single value of a repeated field as a list of one. Names the schema lacks are left
    out (readers.py reports them) and so are scalars at their zero value, which protobuf
    does not keep either."""
    schema = schema or model_config_schema()
    out: dict[str, Any] = {}
    for key, value in raw.items():
        field = schema.fields_by_name.get(str(key))
        if field is None or (value is None and (field.message_type is None or is_repeated(field))):
            continue  # YAML's "field:" with nothing after it: the default
        converted = _field_value(field, value)
        if converted not in (False, 0, "", []):
            out[field.name] = converted
    return out


def _field_value(field: FieldDescriptor, value: Any) -> Any:
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        pairs = value.items() if isinstance(value, Mapping) else _entries(value)
        value_field = entry.fields_by_name["value"]
        return {_map_key(k): _one_value(value_field, v) for k, v in pairs}
    if is_repeated(field):
        items = value if isinstance(value, list | tuple) else [value]
        return [_one_value(field, item) for item in items]
    return _one_value(field, value)


def _entries(value: Any) -> list[tuple[Any, Any]]:
    items = value if isinstance(value, list | tuple) else [value]
    return [(e.get("key"), e.get("value")) for e in items if isinstance(e, Mapping)]


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _one_value(field: FieldDescriptor, value: Any) -> Any:
    message = field.message_type
    if message is not None:
        if value is None:  # YAML's "field:" with nothing after it: an empty message
            return {}
        if not isinstance(value, Mapping) and message.full_name == "inference.ModelParameter":
            # the YAML shorthand readers.py accepts: parameters: {key: "value"}
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            return {"string_value": text}
        return json_form(value, message) if isinstance(value, Mapping) else value
    enum = field.enum_type
    if enum is not None:
        if isinstance(value, int) and not isinstance(value, bool):
            known = enum.values_by_number.get(value)
            return known.name if known is not None else value
        if enum.full_name == "inference.DataType" and isinstance(value, str):
            return V2_TO_TRITON.get(value.upper(), value)  # YAML may name FP32 for TYPE_FP32
    return value


def served(ours: Mapping[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """ModelConfig's rendering ``ours`` laid over the file's fields ``written``, and
    Triton's always-shown zero fields where neither has them."""
    out = _overlay(ours, written)
    _fill(out, _SHOWN_ZEROS)
    return out


def _overlay(top: Mapping[str, Any], bottom: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(top)
    for key, under in bottom.items():
        over = out.get(key)
        if key not in out:
            out[key] = copy.deepcopy(under)  # the caller may change what it gets
        elif isinstance(over, Mapping) and isinstance(under, Mapping):
            out[key] = _overlay(over, under)
        elif isinstance(over, list) and isinstance(under, list):
            # items by position: a config's declared inputs, groups and steps come first in
            # ModelConfig too (completed ones after them); ours decides how many there are
            padded = [*under, *[None] * (len(over) - len(under))]
            out[key] = [
                _overlay(a, b) if isinstance(a, Mapping) and isinstance(b, Mapping) else a
                for a, b in zip(over, padded, strict=False)
            ]
    return out


def _fill(target: dict[str, Any], template: Mapping[str, Any]) -> None:
    for key, zero in template.items():
        here = target.get(key)
        if isinstance(zero, Mapping):
            if isinstance(here, dict):
                _fill(here, zero)
        elif isinstance(zero, list) and zero and isinstance(zero[0], Mapping):
            for item in here if isinstance(here, list) else []:
                if isinstance(item, dict):
                    _fill(item, zero[0])
        else:
            target.setdefault(key, zero)


@functools.cache
def _message_class() -> Any:
    return message_factory.GetMessageClass(model_config_schema())


def check_served(config: Mapping[str, Any], source: str) -> None:
    """Raise ConfigError unless a served config is a valid compiled ModelConfig message: the
    fields kept as written are checked here, once, so the gRPC answer can always be built.

    A repository of many models often holds one config but for the model's name: a config
    found valid is remembered by its ``repr`` less the names (string fields, which any
    text fills validly), so the others skip protobuf's parse (about half a config's read). A
    config not found valid is parsed every time, so its error is the parse's own."""
    key = _shape(config)
    if key in _VALID:
        return
    try:
        json_format.ParseDict(config, _message_class()())
    except json_format.ParseError as exc:
        problem = str(exc).splitlines()[0]  # the next lines list every field of the message
        raise ConfigError(f"{source}: {problem}") from None
    if len(_VALID) < _VALID_MAX:
        _VALID.add(key)


#: the shapes (:func:`_shape`) of served configs found valid, and how many are kept
_VALID: set[str] = set()
_VALID_MAX = 4096


def _shape(config: Mapping[str, Any]) -> str:
    """The config's ``repr`` (types told apart: a tuple is no list, 1 no "1") with the
    model's and its instance groups' names, both ``string`` fields, left out."""
    shape = dict(config)
    if isinstance(shape.get("name"), str):
        shape["name"] = ""
    groups = shape.get("instance_group")
    if isinstance(groups, list):
        shape["instance_group"] = [
            {**g, "name": ""} if isinstance(g, dict) and isinstance(g.get("name"), str) else g
            for g in groups
        ]
    return repr(shape)
