"""Reading a model's configuration file into a :class:`ModelConfig` (completing it from the
model file is config/auto_complete.py's; each section's mapping, config/section_reader.py's).

A model folder holds at most one of two formats, with the same field names and nesting
(Triton's ``model_config.proto``), so a config moves between them line by line:

Triton's ``config.pbtxt`` (protobuf text format)::

    name: "resnet"                       # optional; must equal the folder name if given
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
    output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1000 ] } ]
    instance_group [ { count: 2 kind: KIND_CPU } ]
    version_policy: { latest: { num_versions: 2 } }
    dynamic_batching {
      max_queue_delay_microseconds: 500
      priority_queue_policy { key: 1 value: { max_queue_size: 64 } }
    }
    parameters { key: "intra_op_thread_count" value: { string_value: "2" } }

inferplex's ``config.yaml`` (or ``config.yml``), the same configuration::

    name: resnet
    platform: onnxruntime_onnx
    max_batch_size: 8
    input: [{name: input, data_type: FP32, dims: [3, 224, 224]}]   # TYPE_FP32 works too
    output: [{name: probs, data_type: TYPE_FP32, dims: [1000]}]
    instance_group: [{count: 2, kind: KIND_CPU}]
    version_policy: {latest: {num_versions: 2}}
    dynamic_batching:
      max_queue_delay_microseconds: 500
      priority_queue_policy: {1: {max_queue_size: 64}}
    parameters: {intra_op_thread_count: "2"}    # or {key: {string_value: "2"}}

In YAML a map may also be written as Triton's list of ``{key: ..., value: ...}`` entries,
and a field with nothing after it (``dynamic_batching:``) is an empty message.

Fields this server does not honour yet (``batch_input``, ``optimization.priority``, ...) and
unknown names (typos) never fail the load: they are listed in
``ModelConfig.unsupported_fields`` as ``"batch_input (not supported yet)"`` or
``"max_batchsize (unknown field)"`` for the loader to warn about. A Triton field left at its
proto3 zero value (``false``, ``0``, ``""``, ``[]``, ``FORMAT_NONE``) is not listed: to
protobuf it is the same as not being there, and the JSON that ``/v2/models/{m}/config``
returns is full of them. Such fields are still served back as written
(``ModelConfig.as_written``, config/served.py), as Triton serves every field of a config, so
they must hold values of their protobuf types. Everything else wrong gives one
:class:`ConfigError` with one line per problem, each naming the file, the field path and what
was expected.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from inferplex.config.auto_complete import DEFAULT_MAX_BATCH_SIZE, complete_config
from inferplex.config.model_config import ModelConfig
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.read_errors import describe
from inferplex.config.section_reader import SectionReader
from inferplex.config.served import check_served, json_form
from inferplex.errors import ConfigError

PBTXT_NAME = "config.pbtxt"
YAML_NAMES = ("config.yaml", "config.yml")

__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "PBTXT_NAME",
    "YAML_NAMES",
    "complete_config",
    "config_from_dict",
    "read_model_config",
    "use_config_name",
]


#: the variant config every model folder is read from where it has one (tritonserver's
#: --model-config-name): ``configs/<name>.pbtxt``. Process-wide, set once at start by the
#: server (``use_config_name``), so every reader of the repository sees the same configs
_config_name = ""


def use_config_name(name: str) -> None:
    """Read ``configs/<name>.pbtxt`` in place of a model's config file where there is one
    ("": the config file, the default)."""
    global _config_name
    _config_name = name


def read_model_config(model_dir: Path) -> ModelConfig | None:
    """The configuration in ``model_dir``: ``configs/<name>.pbtxt`` when a config name is in
    use and the model has it, else ``config.pbtxt``, ``config.yaml`` or ``config.yml``; None
    when there is none. Blocking (reads a file)."""
    variant = model_dir / "configs" / f"{_config_name}.pbtxt"
    if _config_name and variant.is_file():
        found = [variant]
    else:
        found = [model_dir / n for n in (PBTXT_NAME, *YAML_NAMES) if (model_dir / n).is_file()]
    if not found:
        return None
    if len(found) > 1:
        names = " and ".join(p.name for p in found)
        raise ConfigError(f"model '{model_dir.name}' has both {names}; keep one of them")
    path = found[0]
    file_name = path.relative_to(model_dir).as_posix()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{model_dir.name}/{file_name}: cannot be read: {exc}") from None
    return _config_from_text(text, model_dir.name, file_name)


@functools.lru_cache(maxsize=256)
def _config_from_text(text: str, model_name: str, file_name: str) -> ModelConfig:
    """The config a file's text says (ModelConfig is frozen: one object can be shared). A
    new version of a model reloads it with its config unchanged: parsing and validating that
    again would be most of the load's Python work beside busy serving."""
    source = f"{model_name}/{file_name}"
    pbtxt = file_name.endswith(".pbtxt")
    raw = parse_pbtxt(text, source) if pbtxt else _parse_yaml(text, source)
    return config_from_dict(raw, model_name, source)


def _parse_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of config fields, got {type(data).__name__}"
        )
    return data


def config_from_dict(raw: Mapping[str, Any], model_name: str, source: str) -> ModelConfig:
    """Validate a config in Triton's field names (as either file format reads) into a
    ModelConfig; ``model_name`` is the folder name, ``source`` names the file in errors."""
    reader = SectionReader(source)
    clean = reader.model(raw, model_name)
    if reader.errors:  # structural problems first: pydantic's paths would not line up
        raise ConfigError("\n".join(reader.errors))
    clean["unsupported_fields"] = tuple(reader.unsupported)
    clean["as_written"] = json_form(raw)
    try:
        config = ModelConfig.model_validate(clean)
    except ValidationError as exc:
        raise ConfigError(describe(exc, source)) from None
    check_served(config.to_triton_dict(), source)
    return config
