"""Writing a model configuration: a config dict (Triton's field names, as readers.py reads
them) rendered as ``config.pbtxt`` or ``config.yaml``.

The pbtxt form is protobuf's text format, and the compiled schema (``model_config.desc``, the
one pbtxt.py reads against) says how each field is written: enum values bare
(``kind: KIND_CPU``), strings quoted, and a map field given as a mapping
(``parameters: {k: {string_value: v}}``, the YAML spelling) as the text format's
``{ key: .. value: .. }`` entries. The dict is written as it is, field by field: a field set
to its zero value (``max_batch_size: 0``, which says "never batch") is kept, as readers.py
tells it from a field left out. A name the schema does not know is written by its value's
type, for the reader to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from inferplex.config.pbtxt import model_config_schema

Format = Literal["pbtxt", "yaml"]


def to_pbtxt(config: Mapping[str, Any]) -> str:
    """Render a config dict in protobuf text format, as Triton's ``config.pbtxt``."""
    return "\n".join(_message_lines(config, model_config_schema(), "")) + "\n"


def to_yaml(config: Mapping[str, Any]) -> str:
    """Render a config dict as inferplex's native ``config.yaml`` (same field names)."""
    import yaml

    return yaml.safe_dump(dict(config), sort_keys=False, default_flow_style=None)


def render(config: Mapping[str, Any], fmt: Format) -> str:
    """``config`` as the text of a ``config.pbtxt`` or a ``config.yaml``."""
    return to_pbtxt(config) if fmt == "pbtxt" else to_yaml(config)


def write_config(model_dir: Path, config: Mapping[str, Any], fmt: Format = "pbtxt") -> Path:
    """Write ``config.pbtxt`` or ``config.yaml`` into a model folder; returns its path."""
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / f"config.{fmt}"
    path.write_text(render(config, fmt))
    return path


def _message_lines(message: Mapping[str, Any], schema: Descriptor | None, indent: str) -> list[str]:
    lines: list[str] = []
    for key, value in message.items():
        field = schema.fields_by_name.get(key) if schema is not None else None
        inner = field.message_type if field is not None else None
        if _is_map(field) and isinstance(value, Mapping) and not _map_entry(value):
            value = [{"key": k, "value": v} for k, v in value.items()]
        if isinstance(value, Mapping):
            if value:
                lines += [
                    f"{indent}{key} {{",
                    *_message_lines(value, inner, indent + "  "),
                    f"{indent}}}",
                ]
            else:
                lines.append(f"{indent}{key} {{ }}")
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            lines.append(f"{indent}{key} [")
            for i, item in enumerate(value):
                closing = "}," if i < len(value) - 1 else "}"
                lines += [
                    f"{indent}  {{",
                    *_message_lines(item, inner, indent + "    "),
                    indent + "  " + closing,
                ]
            lines.append(f"{indent}]")
        elif isinstance(value, list):
            items = ", ".join(_scalar(field, v) for v in value)
            lines.append(f"{indent}{key}: [ {items} ]" if items else f"{indent}{key}: [ ]")
        else:
            lines.append(f"{indent}{key}: {_scalar(field, value)}")
    return lines


def _is_map(field: FieldDescriptor | None) -> bool:
    return (
        field is not None
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _map_entry(value: Mapping[str, Any]) -> bool:
    """Whether a map field's mapping is one entry already (``{key: .., value: ..}``)."""
    return "key" in value and set(value) <= {"key", "value"}


def _scalar(field: FieldDescriptor | None, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if field is not None and field.enum_type is not None:
        return str(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
