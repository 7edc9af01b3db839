"""Which scope each endpoint belongs to.

``health`` endpoints stay open (load balancers and Kubernetes probe them without credentials);
``management`` endpoints change the server (load/unload models, register shared memory, change
instances); everything else, inference and read-only model information, is ``inference``.
"""

from __future__ import annotations

import enum


class Scope(enum.Enum):
    HEALTH = "health"
    INFERENCE = "inference"
    MANAGEMENT = "management"


#: path prefixes of the management API (the repository index, read-only, is inference scope)
_MANAGEMENT_PREFIXES = (
    "/v2/repository/models/",
    "/v2/systemsharedmemory",
    "/v2/cudasharedmemory",
    "/v2/logging",
    "/v2/trace",
)
_HEALTH_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})

#: gRPC methods of inference.GRPCInferenceService by scope (others are inference)
_GRPC_MANAGEMENT = frozenset(
    {
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "TraceSetting",
        "LogSettings",
    }
)
_GRPC_HEALTH = frozenset({"ServerLive", "ServerReady"})


def http_scope(path: str) -> Scope:
    path = path.rstrip("/") or "/"
    if path in _HEALTH_PATHS:
        return Scope.HEALTH
    if path.startswith(_MANAGEMENT_PREFIXES):
        return Scope.MANAGEMENT
    return Scope.INFERENCE


def grpc_scope(full_method: str) -> Scope:
    """Scope of a gRPC method given as ``/package.Service/Method``."""
    method = full_method.rsplit("/", 1)[-1]
    if method in _GRPC_HEALTH:
        return Scope.HEALTH
    if method in _GRPC_MANAGEMENT:
        return Scope.MANAGEMENT
    return Scope.INFERENCE
