"""ModelConfig: everything about one model, in Triton's field names.

Both file formats (config.pbtxt and config.yaml) are read into plain dicts and validated here
once; the result is frozen. ``to_triton_dict`` renders the JSON that Triton's
``/v2/models/{m}/config`` returns, which perf_analyzer and tritonclient read.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from inferplex.config.composite import Cascade, EnsembleScheduling, SizeRouting
from inferplex.config.optimization import Optimization
from inferplex.config.paths import check_file_name
from inferplex.config.sections import Section as _Frozen
from inferplex.config.sections import normalise_datatype as _normalise_datatype
from inferplex.config.sequence_batching import SequenceBatching
from inferplex.config.served import served
from inferplex.datatypes import V2_TO_TRITON


class TensorConfig(_Frozen):
    """One declared input or output. ``dims`` exclude the batch dimension when
    ``max_batch_size > 0`` (Triton's convention); -1 is a variable dimension."""

    name: str
    data_type: str = Field(description="V2 datatype name, e.g. FP32 (TYPE_FP32 is accepted)")
    dims: tuple[int, ...] = ()
    reshape: tuple[int, ...] | None = Field(
        default=None, description="shape the backend sees, if it differs from dims"
    )
    optional: bool = False
    is_shape_tensor: bool = False
    format: Literal["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"] = Field(
        default="FORMAT_NONE", description="layout of an image input (inputs only); served back"
    )
    label_filename: str = Field(
        default="",
        description="file of class labels in the model's folder (outputs only); served back",
    )

    _check_datatype = field_validator("data_type", mode="before")(_normalise_datatype)

    @field_validator("label_filename")
    @classmethod
    def _check_label_file(cls, value: str) -> str:
        # like every configured file: inside the model's folder (config/paths.py)
        return check_file_name(value, "the model folder") if value else value

    @field_validator("dims", "reshape")
    @classmethod
    def _check_dims(cls, dims: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if dims is not None and any(d < -1 or d == 0 for d in dims):
            raise ValueError(f"dims must be positive or -1 (variable), got {list(dims)}")
        return dims


class VersionPolicy(_Frozen):
    """Which versions of the model are served: the latest N, all, or a specific list."""

    policy: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = Field(default=1, ge=1)
    versions: tuple[int, ...] = ()

    def select(self, available: list[int]) -> list[int]:
        """The versions to serve, from the version numbers found on disk."""
        ordered = sorted(available)
        if self.policy == "all":
            return ordered
        if self.policy == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.num_versions :]


class RateLimiterResource(_Frozen):
    """A named token an instance holds while it executes (Triton's rate limiter)."""

    name: str
    count: int = Field(default=1, ge=0)
    global_: bool = Field(default=False, alias="global", description="shared by every device")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class RateLimiter(_Frozen):
    resources: tuple[RateLimiterResource, ...] = ()
    priority: int = Field(default=0, ge=0, description="among ties, 2 gets half the turns of 1")


class InstanceGroup(_Frozen):
    name: str = ""
    count: int = Field(default=1, ge=1)
    kind: Literal["KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"] = "KIND_AUTO"
    gpus: tuple[int, ...] = ()
    rate_limiter: RateLimiter | None = None


class Scheduling(_Frozen):
    """inferplex's own section (Triton has none): how the model shares compute with others
    under the server's scheduling policy."""

    weight: float = Field(default=1.0, gt=0, description="share of compute under 'priority'")
    slo_p99_ms: float | None = Field(
        default=None, gt=0, description="latency target the 'adaptive' policy holds"
    )
    adaptive_batching: bool = Field(
        default=False,
        description="learn execution time per batch size online and pick the batch size and "
        "queue delay that maximise throughput while holding slo_p99_ms",
    )
    nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="nice steps below the server that the model's compute threads run at "
        "(Linux): under CPU contention the kernel serves the other models' threads first; "
        "0 = the server's priority",
    )

    @model_validator(mode="after")
    def _adaptive_needs_target(self) -> Scheduling:
        if self.adaptive_batching and self.slo_p99_ms is None:
            raise ValueError("scheduling.adaptive_batching needs scheduling.slo_p99_ms (a target)")
        return self


class ResponseCache(_Frozen):
    enable: bool = False


class ModelTransactionPolicy(_Frozen):
    """Triton's ``model_transaction_policy``: a decoupled model sends zero or more responses
    per request (the last flagged final), served over streams (gRPC ModelStreamInfer, HTTP
    generate_stream)."""

    decoupled: bool = False


class QueuePolicy(_Frozen):
    timeout_action: Literal["REJECT", "DELAY"] = "REJECT"
    default_timeout_microseconds: int = Field(default=0, ge=0)
    allow_timeout_override: bool = False
    max_queue_size: int = Field(default=0, ge=0)


class DynamicBatching(_Frozen):
    """Parsed and validated; honoured by the dynamic batcher."""

    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = Field(default=0, ge=0)
    preserve_ordering: bool = False
    priority_levels: int = Field(default=0, ge=0)
    default_priority_level: int = Field(default=0, ge=0)
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_levels(self) -> DynamicBatching:
        # preferred sizes are checked against max_batch_size once the config is complete
        if self.default_priority_level > self.priority_levels:
            raise ValueError(
                f"default_priority_level {self.default_priority_level} is above "
                f"priority_levels {self.priority_levels}"
            )
        for level in self.priority_queue_policy:
            if not 1 <= level <= self.priority_levels:
                raise ValueError(
                    f"priority_queue_policy has level {level}, expected 1 to priority_levels "
                    f"{self.priority_levels}"
                )
        return self


class WarmupInput(_Frozen):
    """One input of a warm-up sample: its type and shape (without the batch dimension) and
    where its data comes from: zeros, random values, or a raw file in ``<model>/warmup/``."""

    data_type: str
    dims: tuple[int, ...] = ()
    zero_data: bool = False
    random_data: bool = False
    input_data_file: str = ""

    _check_datatype = field_validator("data_type", mode="before")(_normalise_datatype)

    @field_validator("input_data_file")
    @classmethod
    def _check_file(cls, value: str) -> str:
        # read from <model>/warmup/ (lifecycle/warmup.py): never from anywhere else
        return check_file_name(value, "the model's warmup/ folder") if value else value

    @model_validator(mode="after")
    def _check_source(self) -> WarmupInput:
        sources = [self.zero_data, self.random_data, bool(self.input_data_file)]
        if sum(sources) != 1:
            raise ValueError(
                "a warm-up input needs exactly one of zero_data, random_data or input_data_file"
            )
        if any(d < 0 for d in self.dims):
            raise ValueError(f"warm-up dims must be fixed (>= 0), got {list(self.dims)}")
        return self


class ModelWarmup(_Frozen):
    """A sample run ``count`` times (0 means once) when the model loads, before it is
    marked ready (Triton's ``model_warmup``)."""

    name: str = ""
    batch_size: int = Field(default=0, ge=0)
    inputs: dict[str, WarmupInput] = Field(default_factory=dict)
    count: int = Field(default=0, ge=0)


class ModelConfig(_Frozen):
    """The configuration of one model (all of its versions)."""

    name: str
    platform: str = ""
    backend: str = ""
    max_batch_size: int = Field(default=0, ge=0)
    input: tuple[TensorConfig, ...] = ()
    output: tuple[TensorConfig, ...] = ()
    instance_group: tuple[InstanceGroup, ...] = ()
    version_policy: VersionPolicy = VersionPolicy()
    dynamic_batching: DynamicBatching | None = None
    sequence_batching: SequenceBatching | None = None
    scheduling: Scheduling = Scheduling()
    response_cache: ResponseCache = ResponseCache()
    model_transaction_policy: ModelTransactionPolicy = ModelTransactionPolicy()
    ensemble_scheduling: EnsembleScheduling | None = None
    cascade: Cascade | None = None
    size_routing: SizeRouting | None = None
    parameters: dict[str, str] = Field(default_factory=dict)
    default_model_filename: str = ""
    model_warmup: tuple[ModelWarmup, ...] = ()
    optimization: Optimization | None = None
    unsupported_fields: tuple[str, ...] = Field(
        default=(), description="fields read from the file that this server does not honour yet"
    )
    as_written: dict[str, Any] = Field(
        default_factory=dict,
        description="the file's fields in protobuf's JSON form (config/served.py): served back "
        "beneath what the fields above say, so no Triton field is lost",
    )

    @field_validator("default_model_filename")
    @classmethod
    def _check_filename(cls, value: str) -> str:
        # a config may come from a client (the load API): it names a file in a version
        # folder, never one elsewhere (lifecycle/planning.py resolves links too)
        return check_file_name(value, "the version folder") if value else value

    @model_validator(mode="after")
    def _check_names(self) -> ModelConfig:
        for kind, tensors in (("input", self.input), ("output", self.output)):
            seen: set[str] = set()
            for tensor in tensors:
                if tensor.name in seen:
                    raise ValueError(f"{kind} '{tensor.name}' is declared twice")
                seen.add(tensor.name)
        return self

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    def full_shape(self, tensor: TensorConfig) -> list[int]:
        """The shape a client sees: dims with the batch dimension (-1) in front if batched."""
        return [-1, *tensor.dims] if self.batched else list(tensor.dims)

    def to_triton_dict(self) -> dict[str, Any]:
        """The configuration as Triton renders it in JSON (its model_config.proto names):
        what the fields say, over the file's other fields as written."""
        out: dict[str, Any] = {
            "name": self.name,
            "platform": self.platform,
            "backend": self.backend,
            "version_policy": _version_policy_dict(self.version_policy),
            "max_batch_size": self.max_batch_size,
            "input": [_input_dict(t) for t in self.input],
            "output": [_output_dict(t) for t in self.output],
            "instance_group": [
                {
                    "name": g.name or f"{self.name}_{i}",
                    "kind": g.kind,
                    "count": g.count,
                    "gpus": list(g.gpus),
                    **(
                        {"rate_limiter": _rate_limiter_dict(g.rate_limiter)}
                        if g.rate_limiter
                        else {}
                    ),
                }
                for i, g in enumerate(self.instance_group)
            ],
            "default_model_filename": self.default_model_filename,
            "parameters": {k: {"string_value": v} for k, v in self.parameters.items()},
            "model_warmup": [_warmup_dict(w) for w in self.model_warmup],
        }
        if self.dynamic_batching is not None:
            out["dynamic_batching"] = _dynamic_batching_dict(self.dynamic_batching)
        if self.response_cache.enable:
            out["response_cache"] = {"enable": True}
        # perf_analyzer reads it to tell a decoupled model (which it drives with --streaming)
        out["model_transaction_policy"] = {"decoupled": self.model_transaction_policy.decoupled}
        if self.scheduling != Scheduling():
            out["scheduling"] = self.scheduling.model_dump(exclude_none=True)
        if self.ensemble_scheduling is not None:
            out["ensemble_scheduling"] = self.ensemble_scheduling.to_triton_dict()
        for key, section in (("cascade", self.cascade), ("size_routing", self.size_routing)):
            if section is not None:
                out[key] = section.model_dump()
        if self.optimization is not None:
            out["optimization"] = self.optimization.to_triton_dict()
        return served(out, self.as_written)


def _warmup_dict(warmup: ModelWarmup) -> dict[str, Any]:
    inputs: dict[str, Any] = {}
    for name, item in warmup.inputs.items():
        source: dict[str, Any] = (
            {"zero_data": True}
            if item.zero_data
            else {"random_data": True}
            if item.random_data
            else {"input_data_file": item.input_data_file}
        )
        inputs[name] = {
            "data_type": V2_TO_TRITON[item.data_type],
            "dims": list(item.dims),
            **source,
        }
    return {
        "name": warmup.name,
        "batch_size": warmup.batch_size,
        "inputs": inputs,
        "count": warmup.count,
    }


def _version_policy_dict(policy: VersionPolicy) -> dict[str, Any]:
    if policy.policy == "all":
        return {"all": {}}
    if policy.policy == "specific":
        return {"specific": {"versions": list(policy.versions)}}
    return {"latest": {"num_versions": policy.num_versions}}


def _input_dict(tensor: TensorConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tensor.name,
        "data_type": V2_TO_TRITON[tensor.data_type],
        "format": tensor.format,
        "dims": list(tensor.dims),
        "is_shape_tensor": tensor.is_shape_tensor,
        "optional": tensor.optional,
    }
    if tensor.reshape is not None:
        out["reshape"] = {"shape": list(tensor.reshape)}
    return out


def _output_dict(tensor: TensorConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tensor.name,
        "data_type": V2_TO_TRITON[tensor.data_type],
        "dims": list(tensor.dims),
        "label_filename": tensor.label_filename,
        "is_shape_tensor": tensor.is_shape_tensor,
    }
    if tensor.reshape is not None:
        out["reshape"] = {"shape": list(tensor.reshape)}
    return out


def _rate_limiter_dict(limiter: RateLimiter) -> dict[str, Any]:
    return {
        "resources": [
            {"name": r.name, "global": r.global_, "count": r.count} for r in limiter.resources
        ],
        "priority": limiter.priority,
    }


def _queue_policy_dict(policy: QueuePolicy) -> dict[str, Any]:
    return {
        "timeout_action": policy.timeout_action,
        "default_timeout_microseconds": policy.default_timeout_microseconds,
        "allow_timeout_override": policy.allow_timeout_override,
        "max_queue_size": policy.max_queue_size,
    }


def _dynamic_batching_dict(batching: DynamicBatching) -> dict[str, Any]:
    out: dict[str, Any] = {
        "preferred_batch_size": list(batching.preferred_batch_size),
        "max_queue_delay_microseconds": batching.max_queue_delay_microseconds,
        "preserve_ordering": batching.preserve_ordering,
        "priority_levels": batching.priority_levels,
        "default_priority_level": batching.default_priority_level,
        "priority_queue_policy": {
            str(level): _queue_policy_dict(p) for level, p in batching.priority_queue_policy.items()
        },
    }
    if batching.default_queue_policy is not None:
        out["default_queue_policy"] = _queue_policy_dict(batching.default_queue_policy)
    return out
