"""Which scope each endpoint belongs to.

``health`` endpoints stay open (load balancers and Kubernetes probe them without credentials);
``management`` endpoints change the server (load/unload models, register shared memory, change
instances); everything else, inference and read-only model information, is ``inference``.

A scope is a property of a resolved endpoint, never of a raw path: the HTTP route table gives
each route its scope (``frontends/http_routes.py``), and a gRPC method's scope is looked up
by its exact path, which the server resolved before the guard runs.
"""

from __future__ import annotations

import enum


class Scope(enum.Enum):
    HEALTH = "health"
    INFERENCE = "inference"
    MANAGEMENT = "management"


_GRPC_SERVICE = "/inference.GRPCInferenceService/"

#: gRPC methods of inference.GRPCInferenceService by scope
_GRPC_SCOPES: dict[str, Scope] = {
    _GRPC_SERVICE + name: scope
    for names, scope in (
        (("ServerLive", "ServerReady"), Scope.HEALTH),
        (
            (
                "ModelReady",
                "ServerMetadata",
                "ModelMetadata",
                "ModelConfig",
                "ModelStatistics",
                "RepositoryIndex",
                "ModelInfer",
                "ModelStreamInfer",
            ),
            Scope.INFERENCE,
        ),
        (
            (
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
            ),
            Scope.MANAGEMENT,
        ),
    )
    for name in names
}


# gRPC's standard services (frontends/grpc_services.py): health is open, as /v2/health/* is;
# reflection describes the API (the service and message definitions, no model names), and
# is open too; List names every model, as the repository index does
_GRPC_SCOPES.update(
    {
        "/grpc.health.v1.Health/Check": Scope.HEALTH,
        "/grpc.health.v1.Health/Watch": Scope.HEALTH,
        "/grpc.health.v1.Health/List": Scope.INFERENCE,
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo": Scope.HEALTH,
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": Scope.HEALTH,
    }
)


def grpc_scope(full_method: str) -> Scope:
    """Scope of a gRPC method given as its exact path ``/package.Service/Method``. A path
    that is not one of the service's methods is management scope: unknown means closed."""
    return _GRPC_SCOPES.get(full_method, Scope.MANAGEMENT)
