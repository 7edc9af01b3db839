"""The servers by the name ``--http-server`` and ``--grpc-server`` give them: the built-in
one and its reference twin, each built from what it serves (a native app; a method table)
and the one listener spec (transport/listener.py), so that the composition root picks by
name, never by type."""

from __future__ import annotations

from inferplex.transport.grpc_server import GrpcServer
from inferplex.transport.grpcio_server import GrpcioServer
from inferplex.transport.http_server import HttpServer
from inferplex.transport.interface import GrpcServerFactory, HttpServerFactory
from inferplex.transport.uvicorn_http import UvicornHttpServer

__all__ = ["GRPC_SERVERS", "HTTP_SERVERS"]

#: ``--http-server``
HTTP_SERVERS: dict[str, HttpServerFactory] = {"builtin": HttpServer, "uvicorn": UvicornHttpServer}
#: ``--grpc-server``
GRPC_SERVERS: dict[str, GrpcServerFactory] = {"builtin": GrpcServer, "grpcio": GrpcioServer}
