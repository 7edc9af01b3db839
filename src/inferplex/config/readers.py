"""Reading a model's configuration file into a :class:`ModelConfig`, and completing it from
the model file.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from inferplex.config.composite import Cascade, EnsembleStep, SizeRouting, SizeRule
from inferplex.config.model_config import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    ModelTransactionPolicy,
    QueuePolicy,
    ResponseCache,
    Scheduling,
    TensorConfig,
)
from inferplex.config.pbtxt import model_config_schema, parse_pbtxt
from inferplex.config.sequence_batching import SequenceBatching
from inferplex.config.served import check_served, json_form
from inferplex.errors import ConfigError

PBTXT_NAME = "config.pbtxt"
YAML_NAMES = ("config.yaml", "config.yml")

#: max_batch_size given to a model that can batch when its config does not set one: the
#: default of Triton's ``--backend-config=default-max-batch-size``.
DEFAULT_MAX_BATCH_SIZE = 4

_NONE: frozenset[str] = frozenset()


def _schema_fields(message: str) -> frozenset[str]:
    """The field names of ``inference.<message>`` in the compiled schema
    (proto/model_config.proto: Triton's model_config.proto and inferplex's sections)."""
    pool = model_config_schema().file.pool
    return frozenset(pool.FindMessageTypeByName(f"inference.{message}").fields_by_name)


# What ModelConfig has is supported: a field added there is read from both formats. What only
# the compiled schema has is listed as not supported yet; a name in neither is unknown.
_MODEL_FIELDS = frozenset(ModelConfig.model_fields) - {"unsupported_fields", "as_written"}
_INPUT_FIELDS = frozenset(TensorConfig.model_fields) & _schema_fields("ModelInput")
_OUTPUT_FIELDS = frozenset(TensorConfig.model_fields) & _schema_fields("ModelOutput")
_GROUP_FIELDS = frozenset(InstanceGroup.model_fields)
_BATCHING_FIELDS = frozenset(DynamicBatching.model_fields)
_QUEUE_FIELDS = frozenset(QueuePolicy.model_fields)
_SCHEDULING_FIELDS = frozenset(Scheduling.model_fields)
_CACHE_FIELDS = frozenset(ResponseCache.model_fields)
_TRANSACTION_FIELDS = frozenset(ModelTransactionPolicy.model_fields)
_RESOURCE_FIELDS = _schema_fields("ModelRateLimiter.Resource")  # "global" is global_ there
_MODEL_NOT_YET = _schema_fields("ModelConfig") - _MODEL_FIELDS
_INPUT_NOT_YET = _schema_fields("ModelInput") - _INPUT_FIELDS
_OUTPUT_NOT_YET = _schema_fields("ModelOutput") - _OUTPUT_FIELDS
_GROUP_NOT_YET = _schema_fields("ModelInstanceGroup") - _GROUP_FIELDS
_POLICIES = ("latest", "all", "specific")
_OPT_NOT_YET = _schema_fields("ModelOptimizationPolicy") - {"execution_accelerators"}
_ENSEMBLE_FIELDS = frozenset({"step", "max_inflight_requests"})
_ENSEMBLE_NOT_YET = _schema_fields("ModelEnsembling") - _ENSEMBLE_FIELDS
# ModelConfig fields that need reading rather than passing on
_MODEL_MESSAGES = frozenset(
    {"name", "input", "output", "instance_group", "version_policy", "dynamic_batching"}
    | {"parameters", "scheduling", "response_cache", "ensemble_scheduling", "cascade"}
    | {"model_transaction_policy"}
    | {"size_routing"}
    | {"model_warmup", "optimization", "sequence_batching"}
)
_WARMUP_FIELDS = _schema_fields("ModelWarmup")
_WARMUP_INPUT_FIELDS = _schema_fields("ModelWarmup.Input")
_STEP_FIELDS = frozenset(EnsembleStep.model_fields)
_STEP_NOT_YET = _schema_fields("ModelEnsembling.Step") - _STEP_FIELDS
_CASCADE_FIELDS = frozenset(Cascade.model_fields)
_SIZE_ROUTING_FIELDS = frozenset(SizeRouting.model_fields)
_RULE_FIELDS = frozenset(SizeRule.model_fields)


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
    reader = _Reader(source)
    clean = reader.model(raw, model_name)
    if reader.errors:  # structural problems first: pydantic's paths would not line up
        raise ConfigError("\n".join(reader.errors))
    clean["unsupported_fields"] = tuple(reader.unsupported)
    clean["as_written"] = json_form(raw)
    try:
        config = ModelConfig.model_validate(clean)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
    check_served(config.to_triton_dict(), source)
    return config


class _Reader:
    """Picks the supported fields out of the raw dicts into what ModelConfig takes, and
    records unsupported and unknown fields and structural errors on the way."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[str] = []
        self.unsupported: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(
            f"{self.source}: {path}: {message}" if path else f"{self.source}: {message}"
        )

    def fields(
        self, raw: Any, path: str, supported: frozenset[str], not_yet: frozenset[str]
    ) -> dict[str, Any] | None:
        """The supported fields of one message (None if ``raw`` is not a message)."""
        if raw is None:  # YAML's "field:" with nothing after it: an empty message
            return {}
        if not isinstance(raw, Mapping):
            self.error(path, f"expected a message {{ ... }}, got {_show(raw)}")
            return None
        kept: dict[str, Any] = {}
        for key, value in raw.items():
            where = f"{path}.{key}" if path else str(key)
            if key in supported:
                kept[key] = value
            elif key in not_yet:
                if not _is_zero(value):
                    self.unsupported.append(f"{where} (not supported yet)")
            else:
                self.unsupported.append(f"{where} (unknown field)")
        return kept

    def model(self, raw: Mapping[str, Any], model_name: str) -> dict[str, Any]:
        f = self.fields(raw, "", _MODEL_FIELDS, _MODEL_NOT_YET) or {}
        out = _plain(f, _MODEL_MESSAGES)
        out["name"] = model_name
        if f.get("name") not in (None, "", model_name):
            self.error(
                "name",
                f"the config names the model {_show(f['name'])} but its folder is '{model_name}'; "
                "they must be the same (or leave name out)",
            )
        for section, read in _MODEL_SECTIONS:
            if section in f:
                out[section] = read(self, f[section], section)
        return out

    def tensors(self, raw: Any, kind: str) -> list[dict[str, Any]]:
        return [self.tensor(t, f"{kind}[{i}]", kind) for i, t in enumerate(_as_list(raw))]

    def instance_groups(self, raw: Any, path: str) -> list[dict[str, Any]]:
        return [self.instance_group(g, f"{path}[{i}]") for i, g in enumerate(_as_list(raw))]

    def warmups(self, raw: Any, path: str) -> list[dict[str, Any]]:
        return [self.warmup(w, f"{path}[{i}]") for i, w in enumerate(_as_list(raw))]

    def parameters(self, raw: Any, path: str) -> dict[str, str]:
        return {
            str(key): self.parameter_value(value, where)
            for key, value, where in self.map_entries(raw, path)
        }

    def section(self, raw: Any, path: str, model: type[BaseModel]) -> dict[str, Any]:
        """A message read by the fields of its pydantic ``model``: nested messages read in
        turn, a repeated field's single value made a list of one, unknown fields listed."""
        f = self.fields(raw, path, frozenset(model.model_fields), _NONE) or {}
        out: dict[str, Any] = {}
        for key, value in _plain(f).items():
            nested, repeated = _field_shape(model.model_fields[key].annotation)
            if nested is None:
                out[key] = _as_list(value) if repeated else value
            elif repeated:
                out[key] = [
                    self.section(v, f"{path}.{key}[{i}]", nested)
                    for i, v in enumerate(_as_list(value))
                ]
            else:
                out[key] = self.section(value, f"{path}.{key}", nested)
        return out

    def plain_message(self, raw: Any, path: str, known: frozenset[str]) -> dict[str, Any]:
        """A message whose fields go to ModelConfig as they are."""
        return _plain(self.fields(raw, path, known, _NONE) or {})

    def tensor(self, raw: Any, path: str, kind: str) -> dict[str, Any]:
        if kind == "input":
            f = self.fields(raw, path, _INPUT_FIELDS, _INPUT_NOT_YET) or {}
        else:
            f = self.fields(raw, path, _OUTPUT_FIELDS, _OUTPUT_NOT_YET) or {}
        out = _plain(f, ("dims", "reshape"))
        if "dims" in f:
            out["dims"] = _as_list(f["dims"])
        if "reshape" in f:
            reshape = self.fields(f["reshape"], f"{path}.reshape", frozenset({"shape"}), _NONE)
            if reshape is not None:
                out["reshape"] = _as_list(reshape.get("shape"))
        return out

    def instance_group(self, raw: Any, path: str) -> dict[str, Any]:
        f = self.fields(raw, path, _GROUP_FIELDS, _GROUP_NOT_YET) or {}
        out = _plain(f, ("gpus", "rate_limiter"))
        if "rate_limiter" in f:
            out["rate_limiter"] = self.rate_limiter(f["rate_limiter"], f"{path}.rate_limiter")
        if "gpus" in f:
            out["gpus"] = _as_list(f["gpus"])
            if out["gpus"] and out.get("kind") in ("KIND_CPU", "KIND_MODEL"):
                self.error(f"{path}.gpus", f"a {out['kind']} group cannot list GPUs")
        return out

    def rate_limiter(self, raw: Any, path: str) -> dict[str, Any]:
        f = self.fields(raw, path, frozenset({"resources", "priority"}), _NONE) or {}
        out = _plain(f, ("resources",))
        if "resources" in f:
            out["resources"] = [
                _plain(self.fields(r, f"{path}.resources[{i}]", _RESOURCE_FIELDS, _NONE) or {})
                for i, r in enumerate(_as_list(f["resources"]))
            ]
        return out

    def version_policy(self, raw: Any) -> dict[str, Any]:
        f = self.fields(raw, "version_policy", frozenset(_POLICIES), _NONE) or {}
        if len(f) > 1:
            given = " and ".join(f)
            self.error("version_policy", f"expected one of latest, all or specific, got {given}")
            return {}
        if not f:
            return {}
        ((policy, body),) = f.items()
        path = f"version_policy.{policy}"
        if policy == "latest":
            g = self.fields(body, path, frozenset({"num_versions"}), _NONE) or {}
            return {"policy": policy, **_plain(g)}
        if policy == "specific":
            g = self.fields(body, path, frozenset({"versions"}), _NONE) or {}
            return {"policy": policy, "versions": _as_list(g.get("versions"))}
        self.fields(body, path, _NONE, _NONE)
        return {"policy": policy}

    def dynamic_batching(self, raw: Any) -> dict[str, Any]:
        path = "dynamic_batching"
        f = self.fields(raw, path, _BATCHING_FIELDS, _NONE) or {}
        out = _plain(f, ("preferred_batch_size", "default_queue_policy", "priority_queue_policy"))
        if "preferred_batch_size" in f:
            out["preferred_batch_size"] = _as_list(f["preferred_batch_size"])
        if "default_queue_policy" in f:
            out["default_queue_policy"] = self.queue_policy(
                f["default_queue_policy"], f"{path}.default_queue_policy"
            )
        if "priority_queue_policy" in f:
            entries = self.map_entries(f["priority_queue_policy"], f"{path}.priority_queue_policy")
            out["priority_queue_policy"] = {
                key: self.queue_policy(value, where) for key, value, where in entries
            }
        return out

    def ensemble_scheduling(self, raw: Any) -> dict[str, Any]:
        path = "ensemble_scheduling"
        f = self.fields(raw, path, _ENSEMBLE_FIELDS, _ENSEMBLE_NOT_YET) or {}
        steps = []
        for i, step in enumerate(_as_list(f.get("step"))):
            where = f"{path}.step[{i}]"
            g = self.fields(step, where, _STEP_FIELDS, _STEP_NOT_YET) or {}
            out = _plain(g, ("input_map", "output_map"))
            for name in ("input_map", "output_map"):
                if name in g:
                    entries = self.map_entries(g[name], f"{where}.{name}")
                    out[name] = {str(key): value for key, value, _ in entries}
            steps.append(out)
        return {**_plain(f, ("step",)), "step": steps}

    def size_routing(self, raw: Any) -> dict[str, Any]:
        f = self.fields(raw, "size_routing", _SIZE_ROUTING_FIELDS, _NONE) or {}
        out = _plain(f, ("rule",))
        if "rule" in f:
            rules = []
            for i, rule in enumerate(_as_list(f["rule"])):
                g = self.fields(rule, f"size_routing.rule[{i}]", _RULE_FIELDS, _NONE) or {}
                rules.append(_plain(g, ("max_dims",)))
                if "max_dims" in g:
                    rules[-1]["max_dims"] = _as_list(g["max_dims"])
            out["rule"] = rules
        return out

    def warmup(self, raw: Any, path: str) -> dict[str, Any]:
        f = self.fields(raw, path, _WARMUP_FIELDS, _NONE) or {}
        out = _plain(f, ("inputs",))
        if "inputs" in f:
            inputs: dict[str, Any] = {}
            for key, value, where in self.map_entries(f["inputs"], f"{path}.inputs"):
                g = self.fields(value, where, _WARMUP_INPUT_FIELDS, _NONE) or {}
                item = _plain(g, ("dims",))
                if "dims" in g:
                    item["dims"] = _as_list(g["dims"])
                inputs[str(key)] = item
            out["inputs"] = inputs
        return out

    def optimization(self, raw: Any) -> dict[str, Any]:
        """Triton's ``optimization``: its ``execution_accelerators`` (the rest is listed as
        not supported yet); accelerator parameters are a map of strings."""
        f = self.fields(raw, "optimization", frozenset({"execution_accelerators"}), _OPT_NOT_YET)
        path = "optimization.execution_accelerators"
        kinds = frozenset({"gpu_execution_accelerator", "cpu_execution_accelerator"})
        g = self.fields((f or {}).get("execution_accelerators"), path, kinds, _NONE) or {}
        accelerators: dict[str, Any] = {}
        for kind in sorted(g):
            accelerators[kind] = []
            for i, item in enumerate(_as_list(g[kind])):
                where = f"{path}.{kind}[{i}]"
                h = self.fields(item, where, frozenset({"name", "parameters"}), _NONE) or {}
                entry = _plain(h, ("parameters",))
                if "parameters" in h:
                    entries = self.map_entries(h["parameters"], f"{where}.parameters")
                    entry["parameters"] = {
                        str(key): self.parameter_value(value, at) for key, value, at in entries
                    }
                accelerators[kind].append(entry)
        return {"execution_accelerators": accelerators}

    def queue_policy(self, raw: Any, path: str) -> dict[str, Any]:
        return _plain(self.fields(raw, path, _QUEUE_FIELDS, _NONE) or {})

    def map_entries(self, raw: Any, path: str) -> list[tuple[Any, Any, str]]:
        """(key, value, path) of a map written as Triton's ``{key: .., value: ..}`` entries
        or, in YAML, as a plain mapping."""
        if isinstance(raw, Mapping):
            pairs = list(raw.items())
        else:
            pairs = []
            for i, entry in enumerate(_as_list(raw)):
                f = self.fields(entry, f"{path}[{i}]", frozenset({"key", "value"}), _NONE)
                if f is not None and "key" not in f:
                    self.error(f"{path}[{i}]", "a map entry needs a key")
                elif f is not None:
                    pairs.append((f["key"], f.get("value")))
        entries: list[tuple[Any, Any, str]] = []
        seen: set[Any] = set()
        for key, value in pairs:
            if isinstance(key, bool):  # YAML 1.1 reads unquoted yes/no/on/off as booleans
                self.error(path, f"expected a string or integer key, got {key} (quote the key)")
            elif not isinstance(key, str | int):
                self.error(path, f"expected a string or integer key, got {_show(key)}")
            elif key in seen:
                self.error(path, f"key {_show(key)} is given twice")
            else:
                seen.add(key)
                entries.append((key, value, f"{path}[{_key_text(key)}]"))
        return entries

    def parameter_value(self, raw: Any, path: str) -> str:
        if isinstance(raw, Mapping) or raw is None:
            f = self.fields(raw, path, frozenset({"string_value"}), _NONE) or {}
            raw = f.get("string_value", "")
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if isinstance(raw, str | int | float):
            return str(raw)
        self.error(f"{path}.string_value", f"expected a string, got {_show(raw)}")
        return ""


#: the sections of a model config that need reading, in the order they are read (the order
#: of the errors found): each read by ``read(reader, raw, section)``
_MODEL_SECTIONS: tuple[tuple[str, Callable[[_Reader, Any, str], Any]], ...] = (
    ("input", _Reader.tensors),
    ("output", _Reader.tensors),
    ("instance_group", _Reader.instance_groups),
    ("version_policy", lambda reader, raw, _: reader.version_policy(raw)),
    ("dynamic_batching", lambda reader, raw, _: reader.dynamic_batching(raw)),
    ("ensemble_scheduling", lambda reader, raw, _: reader.ensemble_scheduling(raw)),
    ("size_routing", lambda reader, raw, _: reader.size_routing(raw)),
    ("scheduling", lambda r, raw, path: r.plain_message(raw, path, _SCHEDULING_FIELDS)),
    ("response_cache", lambda r, raw, path: r.plain_message(raw, path, _CACHE_FIELDS)),
    (
        "model_transaction_policy",
        lambda r, raw, path: r.plain_message(raw, path, _TRANSACTION_FIELDS),
    ),
    ("cascade", lambda r, raw, path: r.plain_message(raw, path, _CASCADE_FIELDS)),
    ("optimization", lambda reader, raw, _: reader.optimization(raw)),
    ("model_warmup", _Reader.warmups),
    ("sequence_batching", lambda r, raw, path: r.section(raw, path, SequenceBatching)),
    ("parameters", _Reader.parameters),
)


def _plain(fields: Mapping[str, Any], special: Iterable[str] = ()) -> dict[str, Any]:
    """The fields that go to ModelConfig as they are: all but the ``special`` ones, which
    need reading, and the empty ones (YAML's "field:" with nothing after it keeps the default)."""
    return {k: v for k, v in fields.items() if v is not None and k not in special}


def _field_shape(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """A pydantic field's message type (None: a scalar) and whether it is repeated (a
    tuple), from its annotation (``tuple[State, ...]``, ``StrategyDirect | None``)."""
    repeated = get_origin(annotation) is tuple
    if repeated:
        annotation = get_args(annotation)[0]
    elif get_origin(annotation) in (Union, UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
    return (annotation if nested else None), repeated


def _as_list(value: Any) -> list[Any]:
    """A repeated field's values; a single value (YAML's ``dims: 16``) is a list of one."""
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _is_zero(value: Any) -> bool:
    """Whether protobuf would treat the value as not set (proto3 zero values)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value == 0
    return value in ("", "FORMAT_NONE") or (isinstance(value, list) and not value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(exc: ValidationError, source: str) -> str:
    """One line per pydantic error: file, field path in the file's own names, expectation."""
    lines = []
    for err in exc.errors():
        path = _file_path(err["loc"])
        if err["type"] == "missing":
            problem = "is required"
        elif err["type"] == "value_error":
            problem = err["msg"].removeprefix("Value error, ")
        else:
            problem = err["msg"].replace("Input should be", "expected", 1)
            problem += f", got {_show(err['input'])}"
        lines.append(f"{source}: {path}: {problem}" if path else f"{source}: {problem}")
    return "\n".join(lines)


def _key_text(key: int | str) -> str:
    """A map key as shown in a message: quoted when it holds line breaks or control characters,
    so every message stays one line per problem."""
    return repr(key) if isinstance(key, str) and not key.isprintable() else str(key)


def _file_path(loc: Sequence[int | str]) -> str:
    """ModelConfig's error location as the path of the field in the file."""
    text = ""
    previous: int | str | None = None
    for item in loc:
        if item == "[key]":
            text += ".key"
        elif isinstance(item, int) or previous in ("parameters", "priority_queue_policy"):
            text += f"[{_key_text(item)}]"
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


def complete_config(
    config: ModelConfig | None,
    name: str,
    inputs: Sequence[TensorConfig],
    outputs: Sequence[TensorConfig],
) -> ModelConfig:
    """Complete a config (None: no config file) from the model file's own signature, as
    Triton's auto-complete does for ONNX models, and check the two agree.

    ``inputs``/``outputs`` are the model's tensors with the batch dimension as their first
    dim (``(-1, 4)``). ``name`` is used only when there is no config. The rules:

    - The model *can batch* when every input and output has a variable (-1) first dim. Then
      a config that does not set ``max_batch_size`` (or no config) gets
      :data:`DEFAULT_MAX_BATCH_SIZE`, like Triton. Unlike Triton, an explicit
      ``max_batch_size: 0`` is kept: it is the only way to say "do not batch this model".
    - A model that can batch with ``max_batch_size > 1`` and neither ``dynamic_batching``
      nor ``sequence_batching`` in its config gets ``dynamic_batching {}``, as in Triton.
    - ``max_batch_size > 0`` for a model that cannot batch is an error.
    - With no inputs in the config, all the model's inputs are declared; inputs the config
      leaves out are added too (the model needs them), but for the control and state inputs
      of a sequence model, which the server fills. Outputs are filled only when the
      config declares none, since declaring some keeps the others private, as in Triton.
      Filled dims leave out the batch dimension when batching; a scalar becomes
      ``dims: [1]`` with ``reshape: []``.
    - Each declared tensor must exist in the model with the same datatype, and its shape
      (``reshape`` if given, else ``dims``, with the batch dimension in front when batching)
      must have the model's rank, each dim equal to the model's or -1 on either side.
    """
    base = config if config is not None else ModelConfig(name=name)
    name = base.name
    fields: dict[str, Any] = dict(base)
    fixed = [t for t in (*inputs, *outputs) if not t.dims or t.dims[0] != -1]
    max_batch_size = base.max_batch_size
    if "max_batch_size" not in base.model_fields_set and not fixed:
        max_batch_size = fields["max_batch_size"] = DEFAULT_MAX_BATCH_SIZE
    if max_batch_size > 0 and fixed:
        shapes = ", ".join(f"'{t.name}' {list(t.dims)}" for t in fixed)
        raise ConfigError(
            f"model '{name}': max_batch_size is {max_batch_size} but the model cannot batch: "
            f"every input and output needs a variable (-1) first dimension, and these do not: "
            f"{shapes}; set max_batch_size: 0"
        )
    if max_batch_size > 1 and base.dynamic_batching is None and base.sequence_batching is None:
        fields["dynamic_batching"] = DynamicBatching()
    batched = max_batch_size > 0
    # a sequence model's control and state tensors are the server's, never the client's
    sequences = base.sequence_batching
    own = (sequences.server_inputs | sequences.state_outputs) if sequences else frozenset()
    for kind, declared, model in (("input", base.input, inputs), ("output", base.output, outputs)):
        _check_declared(name, kind, declared, model, batched)
        names = {t.name for t in declared} | own
        if kind == "input" or not declared:
            fields[kind] = [
                *declared,
                *(_from_model(t, batched) for t in model if t.name not in names),
            ]
    try:
        return ModelConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, f"model '{name}'")) from None


def _from_model(tensor: TensorConfig, batched: bool) -> dict[str, Any]:
    """The declaration of a model tensor (validated with the rest of the config)."""
    dims = tensor.dims[1:] if batched else tensor.dims
    declared = {"name": tensor.name, "data_type": tensor.data_type, "dims": dims or (1,)}
    if not dims:  # Triton's dims may not be empty: a scalar is [1], reshaped to []
        declared["reshape"] = ()
    return declared


def _check_declared(
    name: str,
    kind: str,
    declared: Sequence[TensorConfig],
    model: Sequence[TensorConfig],
    batched: bool,
) -> None:
    by_name = {t.name: t for t in model}
    for tensor in declared:
        found = by_name.get(tensor.name)
        if found is None:
            known = ", ".join(f"'{n}'" for n in by_name) or "none"
            raise ConfigError(
                f"model '{name}': the config declares {kind} '{tensor.name}' but the model has "
                f"no such {kind} (its {kind}s: {known})"
            )
        if tensor.data_type != found.data_type:
            raise ConfigError(
                f"model '{name}': {kind} '{tensor.name}' is declared {tensor.data_type} in the "
                f"config but is {found.data_type} in the model"
            )
        field = "reshape" if tensor.reshape is not None else "dims"
        own = list(tensor.reshape if tensor.reshape is not None else tensor.dims)
        shape = [-1, *own] if batched else own
        if len(shape) != len(found.dims) or any(
            a != b and -1 not in (a, b) for a, b in zip(shape, found.dims, strict=False)
        ):
            if batched:
                batch = f" (with the batch dimension: {shape})"
            elif len(found.dims) == len(own) + 1:
                batch = (
                    " (max_batch_size is 0, so dims are the full shape, batch dimension included)"
                )
            else:
                batch = ""
            raise ConfigError(
                f"model '{name}': {kind} '{tensor.name}' has {field} {own} in the config"
                f"{batch}, which does not fit the model's shape {list(found.dims)}"
            )
