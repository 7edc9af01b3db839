"""What the server tells about itself: logs, traces, metrics and its name
(docs/observability.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from inferplex.config.settings.section import FlagChoices, NoFlag, SettingsSection


class ObservabilitySettings(SettingsSection):
    """Logging, OpenTelemetry tracing, the metrics sampler and the server's name."""

    # a str checked by configure_logging, so that INFERPLEX_LOG_LEVEL gets its message too
    log_level: Annotated[str, FlagChoices(("debug", "info", "warning", "error"))] = Field(
        default="info", description="debug, info, warning or error"
    )
    log_format: Annotated[
        Literal["plain", "json", "iso8601"],
        FlagChoices(("plain", "json", "iso8601", "default")),
    ] = Field(
        default="plain",
        description="log lines as plain text, one JSON object per line, or plain text whose "
        "time is ISO 8601 in UTC (tritonserver's spellings: default = plain, ISO8601)",
    )
    log_file: Path | None = Field(
        default=None,
        description="append the log to this file (worker processes' lines too) instead of "
        "writing it to stderr",
    )
    trace_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of requests traced with OpenTelemetry (0 = tracing off; when on, a "
        "client's W3C traceparent sampling decision is followed); needs the 'tracing' extra",
    )
    trace_exporter: Literal["otlp", "console"] = Field(
        default="otlp", description="where spans go: OTLP over HTTP, or the console"
    )
    trace_endpoint: str = Field(
        default="",
        description="OTLP/HTTP traces URL (empty: the exporter's default, "
        "http://localhost:4318/v1/traces, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
    )
    metrics_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="seconds between the sampler's readings: the window of the CPU "
        "utilisation and busy-ratio gauges of /metrics and of the dashboard's points "
        "(tritonserver's --metrics-interval-ms)",
    )
    gpu_metrics: Annotated[bool, NoFlag] = Field(
        default=True,
        description="export the nv_gpu_* metrics (and show the GPUs on the dashboard) when NVML "
        "sees a GPU; off: NVML is never opened (tritonserver's --allow-gpu-metrics=false)",
    )
    server_name: Annotated[str, NoFlag] = Field(
        default="inferplex",
        description="the name server metadata answers with (tritonserver's --id)",
    )

    @field_validator("log_format", mode="before")
    @classmethod
    def _triton_log_format(cls, value: Any) -> Any:
        """tritonserver's --log-format values: ``default`` (plain) and ``ISO8601``."""
        return {"default": "plain", "ISO8601": "iso8601"}.get(value, value)
