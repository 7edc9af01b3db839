"""The server's and the models' lifecycle: start, readiness and shutdown; which models load
when, and the memory they may take (docs/lifecycle.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ByteSize, Field, NonNegativeInt, field_validator
from pydantic_settings import NoDecode

from inferplex.config.settings.section import NoFlag, SettingsSection


class StartStopSettings(SettingsSection):
    """How the server starts (what a failed model load does, readiness) and stops."""

    drain_delay_s: float = Field(
        default=0.0,
        ge=0,
        description="on SIGTERM, seconds to keep serving with readiness false before the "
        "listeners close (lets load balancers stop sending first)",
    )
    exit_timeout_secs: float = Field(
        default=30.0,
        ge=0,
        description="on SIGTERM/SIGINT, seconds (after --drain-delay-s) to wait for in-flight "
        "work, requests and model loads, before exiting anyway with status 3 "
        "(tritonserver's --exit-timeout-secs)",
    )
    auto_complete_config: Annotated[bool, NoFlag] = Field(
        default=True,
        description="complete model configs from the model (an ONNX file's inputs, outputs and "
        "batching; a Python model's auto_complete_config); off: every model needs a config "
        "file that declares them (tritonserver's --disable-auto-complete-config and "
        "--strict-model-config=true set it off)",
    )
    exit_on_error: Annotated[bool, NoFlag] = Field(
        default=False,
        description="exit (status 2, naming them) when a model fails to load at start, instead "
        "of serving the others (tritonserver's --exit-on-error, whose default is on)",
    )
    strict_readiness: Annotated[bool, NoFlag] = Field(
        default=False,
        description="readiness (/v2/health/ready, ServerReady) also needs every model the "
        "server was asked to load to be READY: one loading or whose load failed makes the "
        "server not ready (tritonserver's --strict-readiness, whose default is on); off: ready "
        "once started, models answer their own readiness",
    )


class ModelLifecycleSettings(SettingsSection):
    """Which models load when (control mode, on demand, idle unload) and their memory budgets."""

    model_control_mode: Literal["none", "poll", "explicit"] = Field(
        default="none",
        description="none: load every model at start, no load/unload API; poll: also rescan the "
        "repository every repository_poll_secs and (re)load what changed; explicit: load only "
        "load_model at start, then what the API asks",
    )
    repository_poll_secs: float = Field(
        default=15.0, gt=0, description="seconds between repository scans in poll mode"
    )
    load_model: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="models loaded at start in explicit mode ('*' = all); in the environment "
        "comma-separated (or a JSON list)",
    )
    memory_limit: ByteSize = Field(
        default=ByteSize(0),
        ge=0,
        description="bytes of host memory the loaded models may take (e.g. 2GiB); loading past "
        "it evicts idle models, least recently used first; 0 = no limit",
    )
    process_memory_limit: ByteSize = Field(
        default=ByteSize(0),
        ge=0,
        description="bytes of resident memory the whole server (its process and worker "
        "processes) keeps under when it loads a model (e.g. a container's limit less some "
        "headroom): before and after each load idle models are evicted, least recently used "
        "first, until the RSS plus the load's estimate fits; unlike --memory-limit it counts "
        "the server's own memory too; 0 = no limit",
    )
    gpu_memory_limit: Annotated[dict[NonNegativeInt, ByteSize], NoDecode] = Field(
        default_factory=dict,
        description="bytes of GPU memory the models on each GPU may take, as GPU=SIZE pairs "
        "(e.g. 0=8GiB,1=4GiB); loading past one evicts idle models on that GPU, least recently "
        "used first; no effect without a GPU",
    )
    load_nice: int = Field(
        default=19,
        ge=0,
        le=19,
        description="how many nice steps below the server the threads that read, plan and "
        "free models during a load run (Linux), so a load beside serving yields the cores to "
        "it; 0 = the server's priority",
    )
    load_share: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="while requests are in flight, the share of the time a load's steps "
        "(reading, instance creation, warm-up, freeing the replaced version) may take: each "
        "step first waits for the earlier ones' share, so a reload beside busy serving slows "
        "it less and takes longer; 1 = no waits (a load that requests wait for is never paced)",
    )
    load_on_demand: bool = Field(
        default=False, description="a request to a known but unloaded model loads it"
    )
    load_on_demand_timeout_secs: float = Field(
        default=60.0, gt=0, description="how long a request waits for its model's on-demand load"
    )
    idle_unload_secs: float = Field(
        default=0.0,
        ge=0,
        description="unload models without requests for this long (scale to zero); 0 = never",
    )

    @field_validator("load_model", mode="before")
    @classmethod
    def _model_names(cls, value: Any) -> Any:
        """``a,b`` (environment; a JSON list too) -> ("a", "b")."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            return json.loads(value)
        return tuple(filter(None, (name.strip() for name in value.split(","))))

    @field_validator("gpu_memory_limit", mode="before")
    @classmethod
    def _device_sizes(cls, value: Any) -> Any:
        """``0=8GiB,1=4GiB`` (flag or environment; a JSON object too) -> {"0": "8GiB",
        "1": "4GiB"}; pydantic then checks each GPU number and size."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("{"):
            return json.loads(value)
        sizes: dict[str, str] = {}
        for pair in filter(None, (p.strip() for p in value.split(","))):
            device, equals, size = (part.strip() for part in pair.partition("="))
            if not equals or not device or not size:
                raise ValueError(f"'{pair}' is not GPU=SIZE (expected e.g. 0=8GiB,1=4GiB)")
            if device in sizes:
                raise ValueError(f"GPU {device} is given twice")
            sizes[device] = size
        return sizes
