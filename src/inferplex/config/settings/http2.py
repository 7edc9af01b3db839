"""HTTP/2 (the gRPC port) bounds on what one client holds: streams, floods, timeouts,
buffered bytes (docs/security.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class Http2Settings(SettingsSection):
    """The built-in HTTP/2 server's limits, one per attack or stuck client it answers."""

    http2_max_concurrent_streams: int = Field(
        default=1024,
        ge=1,
        description="streams one gRPC connection may have open at once; more are refused with "
        "RST_STREAM REFUSED_STREAM (SETTINGS_MAX_CONCURRENT_STREAMS)",
    )
    http2_max_header_frames: int = Field(
        default=32,
        ge=1,
        description="HEADERS + CONTINUATION frames one header block may take; more: GOAWAY "
        "ENHANCE_YOUR_CALM (the CONTINUATION flood)",
    )
    http2_max_resets: int = Field(
        default=1000,
        ge=1,
        description="streams a gRPC connection may reset before they are answered, have "
        "refused or reset for its errors, in a burst (then http2_resets_per_s; each stream "
        "answered gives one back); past it: GOAWAY ENHANCE_YOUR_CALM (rapid reset)",
    )
    http2_resets_per_s: float = Field(
        default=33.0, ge=0, description="the rate at which the reset budget refills"
    )
    http2_max_control_frames: int = Field(
        default=1000,
        ge=1,
        description="frames that do no work (PING, SETTINGS, PRIORITY, WINDOW_UPDATE, empty "
        "DATA/CONTINUATION, unknown types) a gRPC connection may send in a burst (then "
        "http2_control_frames_per_s; each stream answered gives back 8, each DATA frame sent "
        "one); past it: GOAWAY ENHANCE_YOUR_CALM",
    )
    http2_control_frames_per_s: float = Field(
        default=100.0, ge=0, description="the rate at which the control-frame budget refills"
    )
    http2_preface_timeout_s: float = Field(
        default=10.0,
        ge=0,
        description="seconds a new gRPC connection has to send the HTTP/2 preface and its "
        "SETTINGS; then GOAWAY and close; 0 = no limit",
    )
    http2_idle_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="seconds a gRPC connection may sit with no call in progress and nothing "
        "received (calls whose request stopped arriving do not count); then GOAWAY (NO_ERROR) "
        "and close; 0 = no limit",
    )
    http2_keepalive_s: float = Field(
        default=0.0,
        ge=0,
        description="send a PING after this many seconds in which the client sent nothing; "
        "0 = no keepalive",
    )
    http2_keepalive_timeout_s: float = Field(
        default=20.0,
        gt=0,
        description="seconds a keepalive PING may wait for any answer; then GOAWAY and close",
    )
    http2_max_connection_age_s: float = Field(
        default=0.0,
        ge=0,
        description="seconds after which a gRPC connection is asked to go (GOAWAY NO_ERROR: "
        "clients reconnect, e.g. to a new replica); 0 = no limit",
    )
    http2_max_connection_age_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="seconds calls open at that point may still take; then they are cancelled "
        "and the connection closed; 0 = as long as they take",
    )
    http2_send_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="seconds a gRPC response may wait on a closed flow-control window (or a "
        "client not reading at all) without progress; then the stream is reset (CANCEL) and "
        "its memory freed (a client not reading at all loses the connection); 0 = no limit",
    )
    http2_connection_buffer_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        description="request bytes one gRPC connection may buffer in messages not received "
        "whole (one message alone may take more, up to max_grpc_message_bytes); past it: "
        "RESOURCE_EXHAUSTED; also the answers of one connection waiting for its windows, past "
        "which its new calls get RESOURCE_EXHAUSTED. Server-wide, max_buffered_bytes bounds "
        "HTTP and gRPC together",
    )
