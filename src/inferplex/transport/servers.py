"""The servers by the name ``--grpc-server`` gives them: the built-in one and its reference
twin, each built from its method table and the one listener spec (transport/listener.py),
so that the composition root picks by name, never by type."""

from __future__ import annotations

from inferplex.transport.grpc_server import GrpcServer
from inferplex.transport.grpcio_server import GrpcioServer
from inferplex.transport.interface import GrpcServerFactory

__all__ = ["GRPC_SERVERS"]

#: ``--grpc-server``
GRPC_SERVERS: dict[str, GrpcServerFactory] = {"builtin": GrpcServer, "grpcio": GrpcioServer}
