"""ServerConfig: the server-wide settings, from flags or INFERPLEX_* environment variables."""

from __future__ import annotations

from typing import Literal

from pydantic import DirectoryPath, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerConfig(BaseSettings):
    """Validated once at start-up, then frozen. Every field can be set as INFERPLEX_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="INFERPLEX_", extra="forbid", frozen=True)

    model_repository: DirectoryPath = Field(
        description="folder holding one sub-folder per model (must exist)"
    )
    host: str = Field(default="127.0.0.1", description="address the HTTP and gRPC servers bind")
    http_port: int = Field(default=8000, ge=0, le=65535, description="0 picks a free port")
    grpc_port: int = Field(default=8001, ge=0, le=65535, description="0 picks a free port")
    metrics_port: int = Field(default=8002, ge=0, le=65535, description="0 picks a free port")
    enable_http: bool = True
    enable_grpc: bool = True
    enable_metrics: bool = True
    max_request_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="requests with a larger body get 413"
    )
    max_grpc_message_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="gRPC receive/send message size limit"
    )
    intra_op_threads: int = Field(
        default=0, ge=0, description="threads per ONNX Runtime session; 0 divides the cores"
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
        description="total tokens per rate-limiter resource (JSON in the environment); a "
        "resource not listed gets the largest count any model asks for",
    )
    drain_delay_s: float = Field(
        default=0.0,
        ge=0,
        description="on SIGTERM, seconds to keep serving with readiness false before the "
        "listeners close (lets load balancers stop sending first)",
    )
    cache_size: int = Field(
        default=0,
        ge=0,
        description="bytes of the response cache shared by models with response_cache enabled; "
        "0 = no cache",
    )
    strict_model_config: bool = Field(
        default=False, description="refuse models without a config file instead of completing it"
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")
    server_name: str = "inferplex"
