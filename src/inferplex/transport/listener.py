"""What every server takes, built-in or reference: one listener spec, built once from
ServerConfig (``ListenerSpec.from_config``) — the addresses, TLS and every bound a listener
enforces (docs/security.md lists each with its flag).

The servers read their settings from here and nowhere else, so a limit is named once
(ServerConfig's field, its description the documentation) and mapped once (here): the
built-in HTTP/1.1 server reads ``http1``, the built-in gRPC server ``http2`` and ``grpc``,
uvicorn and grpcio translate the same fields into their own settings
(``uvicorn_http.py``, ``grpcio_server.grpcio_options``).

What the listeners of one process share at run time (the byte budget, the connection gate)
is state, not settings: it is built from the spec by the composition root and handed to
each server beside it.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from inferplex.security.tls import grpc_ssl_context, server_ssl_context
from inferplex.transport.connections import connection_caps
from inferplex.transport.http2_limits import Http2Limits
from inferplex.transport.http_limits import Http1Limits

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig

__all__ = ["Addresses", "GrpcLimits", "ListenerSpec", "TlsFiles"]


@dataclass(frozen=True, slots=True)
class Addresses:
    """Where each endpoint listens; a port of 0 picks a free one, None turns it off."""

    host: str = "127.0.0.1"
    http_port: int | None = 0
    grpc_port: int | None = 0
    metrics_port: int | None = 0
    #: the management API on a port of its own (None: on the HTTP port)
    management_host: str | None = None
    management_port: int | None = None

    def wanted(self) -> dict[str, tuple[str, int] | None]:
        """Each endpoint's (host, port) by name (None: off), in the order they are bound."""
        return {
            "HTTP": _at(self.host, self.http_port),
            "management": _at(self.management_host or self.host, self.management_port)
            if self.http_port is not None
            else None,
            "gRPC": _at(self.host, self.grpc_port),
            "metrics": _at(self.host, self.metrics_port),
        }


def _at(host: str, port: int | None) -> tuple[str, int] | None:
    return (host, port) if port is not None else None


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The listeners' PEM files; with ``client_ca``, clients must present a certificate
    signed by it (mutual TLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def https_context(self) -> ssl.SSLContext:
        """The HTTPS listeners' context (security/tls.py checks the files)."""
        context = server_ssl_context(self.cert, self.key, self.client_ca)
        assert context is not None  # both files are given
        return context

    def grpc_context(self) -> ssl.SSLContext:
        """The gRPC listener's context: the HTTPS one that also offers h2 by ALPN."""
        context = grpc_ssl_context(self.cert, self.key, self.client_ca)
        assert context is not None
        return context


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """The gRPC messages a call may send (either server)."""

    #: a method marked ``large`` (ModelInfer, streams, a load) takes messages up to this
    max_message_bytes: int = 64 << 20
    #: every other method (a few names) up to this; 0: ``max_message_bytes``
    max_small_message_bytes: int = 0

    @property
    def small(self) -> int:
        return self.max_small_message_bytes or self.max_message_bytes


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """Everything a listener is configured with (see the module's docstring); the defaults
    are ServerConfig's where a test builds one by hand."""

    addresses: Addresses = field(default_factory=Addresses)
    #: None: plain TCP
    tls: TlsFiles | None = None
    #: a request line and header block (HTTP/1.1), a header block or metadata (HTTP/2);
    #: 0: the server's default
    max_header_bytes: int = 0
    #: a request body (HTTP/1.1)
    max_body_bytes: int = 64 << 20
    #: request bytes every listener holds together (the shared ByteBudget); 0: no limit
    max_buffered_bytes: int = 0
    #: connections open at once, server-wide and per client address (resolved: the gate's
    #: caps, see ``connections.connection_caps``; 0 per peer: no per-peer cap)
    max_connections: int = 0
    max_connections_per_peer: int = 0
    http1: Http1Limits = field(default_factory=Http1Limits)
    http2: Http2Limits = field(default_factory=Http2Limits)
    grpc: GrpcLimits = field(default_factory=GrpcLimits)

    @classmethod
    def from_config(cls, config: ServerConfig) -> ListenerSpec:
        """The spec of ``config``'s listeners: the one place its settings are mapped."""
        tls = None
        if config.tls_cert_file is not None or config.tls_key_file is not None:
            # half a configuration is refused by security/tls.py with the flag's name
            server_ssl_context(config.tls_cert_file, config.tls_key_file, config.tls_client_ca)
            assert config.tls_cert_file is not None and config.tls_key_file is not None
            tls = TlsFiles(config.tls_cert_file, config.tls_key_file, config.tls_client_ca)
        elif config.tls_client_ca is not None:
            server_ssl_context(None, None, config.tls_client_ca)  # raises, naming the flags
        caps = connection_caps(config.max_connections, config.max_connections_per_peer)
        return cls(
            addresses=Addresses(
                host=config.host,
                http_port=config.http_port if config.enable_http else None,
                grpc_port=config.grpc_port if config.enable_grpc else None,
                metrics_port=config.metrics_port if config.enable_metrics else None,
                management_host=config.management_host,
                management_port=config.management_port,
            ),
            tls=tls,
            max_header_bytes=config.max_header_bytes,
            max_body_bytes=config.max_request_bytes,
            max_buffered_bytes=config.max_buffered_bytes,
            max_connections=caps[0],
            max_connections_per_peer=caps[1],
            http1=Http1Limits(
                header_timeout_s=config.http_header_timeout_s,
                body_timeout_s=config.http_body_timeout_s,
                body_min_rate=config.http_body_min_rate,
                connection_buffer_bytes=config.http_connection_buffer_bytes,
                keep_alive_s=config.http_keep_alive_s,
                send_timeout_s=config.http_send_timeout_s,
            ),
            http2=Http2Limits(
                max_concurrent_streams=config.http2_max_concurrent_streams,
                max_header_frames=config.http2_max_header_frames,
                max_resets=config.http2_max_resets,
                resets_per_s=config.http2_resets_per_s,
                max_control_frames=config.http2_max_control_frames,
                control_frames_per_s=config.http2_control_frames_per_s,
                preface_timeout_s=config.http2_preface_timeout_s,
                idle_timeout_s=config.http2_idle_timeout_s,
                keepalive_s=config.http2_keepalive_s,
                keepalive_timeout_s=config.http2_keepalive_timeout_s,
                max_connection_age_s=config.http2_max_connection_age_s,
                max_connection_age_grace_s=config.http2_max_connection_age_grace_s,
                send_timeout_s=config.http2_send_timeout_s,
                connection_buffer_bytes=config.http2_connection_buffer_bytes,
            ),
            grpc=GrpcLimits(
                max_message_bytes=config.max_grpc_message_bytes,
                max_small_message_bytes=config.max_small_request_bytes,
            ),
        )
