"""Routing and resilience: sticky routes, circuit breakers, request timeouts
(docs/routing.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class RoutingSettings(SettingsSection):
    """The server-wide defaults a model's parameters may override."""

    routing_header: str = Field(
        default="",
        description="HTTP header (over gRPC: metadata key) whose value becomes the request "
        "parameter routing_key (sticky routes), e.g. x-user-id; empty = none",
    )
    breaker_failures: int = Field(
        default=0,
        ge=0,
        description="consecutive execution failures that open a model's circuit breaker (model "
        "parameter breaker_failures overrides); 0 = no breaker",
    )
    breaker_cooldown_s: float = Field(
        default=10.0, ge=0, description="seconds an open breaker fast-fails before a probe"
    )
    request_timeout_ms: float = Field(
        default=0.0,
        ge=0,
        description="answer 504 to requests not answered in time (model parameter "
        "request_timeout_ms overrides); 0 = no timeout",
    )
