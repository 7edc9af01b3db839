"""HTTP/1.1 bounds on what one client holds: time to send headers and bodies, idle time,
buffered bytes (docs/security.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class Http1Settings(SettingsSection):
    """The built-in HTTP/1.1 server's timeouts and buffers, and the server-wide byte budget."""

    http_header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="seconds from a request's first byte (or the TLS handshake's start) to the "
        "end of its header block; slower: 408 and the connection closed",
    )
    http_body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="window over which a request body's rate is measured: a body bringing less "
        "than http_body_min_rate in one gets 408 and the connection closed",
    )
    http_body_min_rate: int = Field(
        default=16 * 1024,
        ge=0,
        description="bytes per second a request body must keep up (0: only a body that stops "
        "for a whole http_body_timeout_s is cut)",
    )
    http_keep_alive_s: float = Field(
        default=5.0,
        gt=0,
        description="seconds an HTTP connection may wait between requests, or before its "
        "first byte; then it is closed",
    )
    http_send_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="seconds an HTTP answer may wait on a client that does not read it; then "
        "the connection is dropped",
    )
    http_connection_buffer_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="request bytes one HTTP connection may buffer while its previous request "
        "runs (pipelining); past it the connection is not read until that answer is sent",
    )
    max_buffered_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=0,
        description="request bytes held server-wide, from arrival until the answer is sent: "
        "bodies (being read, queued, or with a model), what decoding a large one allocates, "
        "and answers waiting for a client; a body that would pass it gets 503 with "
        "Retry-After (its decoding 429 / RESOURCE_EXHAUSTED); 0 = no limit",
    )
