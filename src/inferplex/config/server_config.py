"""ServerConfig: the server-wide settings, from flags or INFERPLEX_* environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerConfig(BaseSettings):
    """Validated once at start-up, then frozen. Every field can be set as INFERPLEX_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="INFERPLEX_", extra="forbid", frozen=True)

    model_repository: Path = Field(description="folder holding one sub-folder per model")
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
    strict_model_config: bool = Field(
        default=False, description="refuse models without a config file instead of completing it"
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")
    server_name: str = "inferplex"
