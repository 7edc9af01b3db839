"""TLS for the HTTP and gRPC listeners, optionally mutual (clients must present a certificate
signed by the given CA)."""

from __future__ import annotations

import ssl
from pathlib import Path

from inferplex.errors import ConfigError


def _files(cert: Path | None, key: Path | None, client_ca: Path | None) -> bool:
    """Whether TLS is on; ConfigError for half a configuration."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError("--tls-client-ca needs --tls-cert-file and --tls-key-file")
        return False
    if cert is None or key is None:
        raise ConfigError("TLS needs both --tls-cert-file and --tls-key-file")
    for path in (cert, key, client_ca):
        if path is not None and not path.is_file():
            raise ConfigError(f"TLS file '{path}' does not exist")
    return True


def server_ssl_context(
    cert: Path | None, key: Path | None, client_ca: Path | None
) -> ssl.SSLContext | None:
    """The HTTPS listeners' TLS context (None when TLS is off); with ``client_ca``, clients
    must present a certificate signed by it."""
    if not _files(cert, key, client_ca):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert), str(key))
        if client_ca is not None:
            context.load_verify_locations(str(client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS files could not be used: {exc}") from None
    return context


def grpc_ssl_context(
    cert: Path | None, key: Path | None, client_ca: Path | None
) -> ssl.SSLContext | None:
    """The gRPC listener's TLS context: the HTTPS one that also offers HTTP/2 by ALPN, which
    gRPC clients require."""
    context = server_ssl_context(cert, key, client_ca)
    if context is not None:
        context.set_alpn_protocols(["h2"])
    return context
