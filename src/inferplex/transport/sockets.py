"""Listening addresses, bound before the models load: a port that is taken fails the start
at once, naming the port, instead of after every model has loaded."""

from __future__ import annotations

import socket

from inferplex.errors import ConfigError


def bind(host: str, port: int, what: str) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0 picks a free port), not listening yet: until
    the server starts serving on it, connections are refused rather than left waiting.
    ConfigError naming ``what`` (e.g. "HTTP") and the address if it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigError(f"cannot listen for {what} on {shown}: {exc.strerror or exc}") from None
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def address(sock: socket.socket) -> str:
    """``host:port`` of a bound socket (``[host]:port`` for IPv6)."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
