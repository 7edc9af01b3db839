"""The per-section mapping of a model config: which fields each message of a raw config
(a config.pbtxt or config.yaml as read, in Triton's field names) has, and how each section
is read into what :class:`ModelConfig` takes.

:class:`SectionReader` picks the supported fields of each message, reads nested sections in
turn, and records on the way the fields not supported yet, the unknown ones and the
structural errors (config/readers.py says what each means to the user). What is supported
is what ModelConfig's sections have; what only the compiled schema
(proto/model_config.proto) has is "not supported yet"; a name in neither is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

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
from inferplex.config.pbtxt import model_config_schema
from inferplex.config.read_errors import key_text, show
from inferplex.config.sequence_batching import SequenceBatching

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


class SectionReader:
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
            self.error(path, f"expected a message {{ ... }}, got {show(raw)}")
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
                f"the config names the model {show(f['name'])} but its folder is '{model_name}'; "
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
                self.error(path, f"expected a string or integer key, got {show(key)}")
            elif key in seen:
                self.error(path, f"key {show(key)} is given twice")
            else:
                seen.add(key)
                entries.append((key, value, f"{path}[{key_text(key)}]"))
        return entries

    def parameter_value(self, raw: Any, path: str) -> str:
        if isinstance(raw, Mapping) or raw is None:
            f = self.fields(raw, path, frozenset({"string_value"}), _NONE) or {}
            raw = f.get("string_value", "")
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if isinstance(raw, str | int | float):
            return str(raw)
        self.error(f"{path}.string_value", f"expected a string, got {show(raw)}")
        return ""


#: the sections of a model config that need reading, in the order they are read (the order
#: of the errors found): each read by ``read(reader, raw, section)``
_MODEL_SECTIONS: tuple[tuple[str, Callable[[SectionReader, Any, str], Any]], ...] = (
    ("input", SectionReader.tensors),
    ("output", SectionReader.tensors),
    ("instance_group", SectionReader.instance_groups),
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
    ("model_warmup", SectionReader.warmups),
    ("sequence_batching", lambda r, raw, path: r.section(raw, path, SequenceBatching)),
    ("parameters", SectionReader.parameters),
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
