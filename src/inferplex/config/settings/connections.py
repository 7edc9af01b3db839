"""Connections and long-lived streams: how many one client and all clients may hold open
(docs/security.md, "Connections"; docs/streaming.md)."""

from __future__ import annotations

from pydantic import Field

from inferplex.config.settings.section import SettingsSection


class ConnectionSettings(SettingsSection):
    """Open connections and health-watch streams, server-wide and per client."""

    max_connections: int = Field(
        default=0,
        ge=0,
        description="connections open at once on all listeners together (HTTP, management, "
        "metrics, gRPC; TLS handshakes included); one more is closed at once (HTTP: 503 first). "
        "0 = from the file-descriptor limit: RLIMIT_NOFILE less a reserve of a quarter (at "
        "least 256) for model files, worker pipes and outbound connections, at most 65536",
    )
    max_connections_per_peer: int = Field(
        default=0,
        ge=-1,
        description="connections one client address (an IPv6 /64) may hold open on all "
        "listeners together; one more is closed at once (HTTP: 503 first). 0 = half of "
        "max_connections; -1 = no per-client cap (behind a proxy whose address every "
        "connection has)",
    )
    health_watch_max_streams: int = Field(
        default=1000,
        ge=0,
        description="gRPC grpc.health.v1.Health/Watch streams open at once, server-wide; one "
        "more is answered RESOURCE_EXHAUSTED; 0 = none allowed",
    )
    health_watch_max_per_connection: int = Field(
        default=16,
        ge=0,
        description="grpc.health.v1.Health/Watch streams open at once on one gRPC connection; "
        "one more is answered RESOURCE_EXHAUSTED",
    )


class StreamSettings(SettingsSection):
    """Streams of responses and of requests, and the sequences waiting for a slot."""

    stream_queue_responses: int = Field(
        default=16,
        ge=1,
        description="responses of one streamed request (a decoupled model's) waiting for a "
        "slow reader; past it the model waits to send more, so a reader that does not read "
        "holds the model back instead of the server's memory",
    )
    stream_max_requests: int = Field(
        default=128,
        ge=1,
        description="requests one gRPC ModelStreamInfer stream may have in flight (sent, "
        "their final response not yet written); past it the stream's messages are not read "
        "until one ends, so HTTP/2 flow control holds the client back",
    )
    max_sequence_backlog: int = Field(
        default=1024,
        ge=0,
        description="sequences of one stateful model (sequence_batching) that may wait for a "
        "slot; a start past it is answered 503 / UNAVAILABLE (each waiting sequence holds its "
        "requests and its state until it runs or idles out)",
    )
