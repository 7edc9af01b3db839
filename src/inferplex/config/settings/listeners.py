"""The listeners: address, ports and which HTTP and gRPC servers serve them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from inferplex.config.settings.section import NoFlag, SettingsSection


class ListenerSettings(SettingsSection):
    """Where the server listens, and with which servers (built-in or the reference twins)."""

    host: str = Field(default="127.0.0.1", description="address the HTTP and gRPC servers bind")
    http_port: int = Field(default=8000, ge=0, le=65535, description="0 picks a free port")
    grpc_port: int = Field(default=8001, ge=0, le=65535, description="0 picks a free port")
    metrics_port: int = Field(default=8002, ge=0, le=65535, description="0 picks a free port")
    enable_http: Annotated[bool, NoFlag] = Field(default=True, description="serve HTTP")
    enable_grpc: Annotated[bool, NoFlag] = Field(default=True, description="serve gRPC")
    enable_metrics: Annotated[bool, NoFlag] = Field(
        default=True, description="serve Prometheus metrics"
    )
    http_server: Literal["builtin", "uvicorn"] = Field(
        default="builtin",
        description="the HTTP/1.1 server: the built-in one, or uvicorn (the reference twin: "
        "same app, its own limits; docs/security.md)",
    )
    grpc_server: Literal["builtin", "grpcio"] = Field(
        default="builtin",
        description="the gRPC server: the built-in one, or grpc.aio (the reference twin: same "
        "methods and guard, grpc-core's HTTP/2)",
    )
