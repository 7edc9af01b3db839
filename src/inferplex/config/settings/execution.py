"""How batches run: on the loop or a thread, how long batching waits, which model's batch
runs next, with how many threads, and the response cache."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class ExecutionSettings(SettingsSection):
    """The scheduler's and the instances' settings, server-wide."""

    inline_execution_us: float = Field(
        default=40.0,
        ge=0,
        description="a batch whose measured execution time is at most this many microseconds "
        "runs on the event loop instead of handing it to the instance's thread (a hand-over "
        "and back costs more than such a batch; CPU ONNX Runtime models with fixed shapes "
        "only); 0 = always hand over",
    )
    queue_delay: Literal["learned", "fixed"] = Field(
        default="learned",
        description="max_queue_delay_microseconds is waited for only while it gathers requests: "
        "'learned' closes batches without it once nearly no batch held more than one request "
        "(one in 16 still waits, to notice traffic growing); 'fixed' always waits it, as Triton",
    )
    intra_op_threads: int = Field(
        default=0,
        ge=0,
        description="intra-op threads per model instance (ONNX Runtime, torch); 0 divides "
        "the cores",
    )
    scheduling_policy: Literal["round_robin", "priority", "adaptive"] = Field(
        default="priority",
        description="which ready batch runs next when models compete: round_robin, priority "
        "(weighted fair shares by each model's scheduling.weight), adaptive (shares follow each "
        "model's p99 against its scheduling.slo_p99_ms)",
    )
    max_concurrent_batches: int = Field(
        default=0, ge=0, description="batch executions running at once server-wide; 0 = cores"
    )
    rate_limit_resources: dict[str, int] = Field(
        default_factory=dict,
        description='total tokens per rate-limiter resource, a JSON object such as {"R1": 4}; '
        "a resource not listed gets the largest count any model asks for",
    )
    cache_size: int = Field(
        default=0,
        ge=0,
        description="bytes of the response cache shared by models with response_cache enabled; "
        "0 = no cache",
    )
