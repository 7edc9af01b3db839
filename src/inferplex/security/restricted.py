"""Triton's restricted APIs, enforced: an API in a restricted group answers only calls that
carry the group's header with its value (``--http-restricted-api``,
``--grpc-restricted-protocol``; docs/security.md). This sits beside the tokens, not in place
of them: a call must pass both.

Each endpoint's API category is a property of the resolved endpoint (the HTTP route table
says it; a gRPC method's is looked up by its exact path), as its scope is. The refusals say
what Triton's say ("This API is restricted, expecting header '<key>'"; on gRPC "This
protocol is restricted, ..."), which tritonclient users and Triton's tests look for; the
code is PERMISSION_DENIED (403) on both, where Triton answers gRPC calls UNAVAILABLE, which
clients retry."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from inferplex.config.restricted_apis import RestrictedGroup, parse_groups
from inferplex.errors import PermissionDeniedError

#: Triton's gRPC metadata keys are the group's key with this prefix
GRPC_PREFIX = "triton-grpc-protocol-"

_SERVICE = "/inference.GRPCInferenceService/"
#: the API category of each gRPC method (those not here belong to none: never restricted)
_GRPC_APIS: dict[str, str] = {
    **{
        _SERVICE + name: api
        for names, api in (
            (("ServerLive", "ServerReady", "ModelReady"), "health"),
            (("ServerMetadata", "ModelMetadata"), "metadata"),
            (("ModelInfer", "ModelStreamInfer"), "inference"),
            (("ModelConfig",), "model-config"),
            (("ModelStatistics",), "statistics"),
            (
                ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
                "model-repository",
            ),
            (
                (
                    "SystemSharedMemoryStatus",
                    "SystemSharedMemoryRegister",
                    "SystemSharedMemoryUnregister",
                    "CudaSharedMemoryStatus",
                    "CudaSharedMemoryRegister",
                    "CudaSharedMemoryUnregister",
                ),
                "shared-memory",
            ),
            (("TraceSetting",), "trace"),
            (("LogSettings",), "logging"),
        )
        for name in names
    },
    # Triton's "health" covers gRPC's health service too
    "/grpc.health.v1.Health/Check": "health",
    "/grpc.health.v1.Health/Watch": "health",
    "/grpc.health.v1.Health/List": "health",
}


class Restrictions:
    """The restricted groups of one protocol: per API, the header and the value it needs."""

    def __init__(self, groups: Sequence[RestrictedGroup], *, grpc: bool = False) -> None:
        prefix = GRPC_PREFIX if grpc else ""
        #: api -> (the header as the operator wrote it, its value)
        self._needed = {
            api: (prefix + group.key, group.value) for group in groups for api in group.apis
        }
        self._what = "protocol" if grpc else "API"

    @classmethod
    def of(cls, values: Sequence[str], *, grpc: bool = False) -> Restrictions:
        """From the setting's values (``<apis>:<key>=<value>`` each)."""
        setting = "--grpc-restricted-protocol" if grpc else "--http-restricted-api"
        return cls(parse_groups(setting, values), grpc=grpc)

    def __bool__(self) -> bool:
        return bool(self._needed)

    def check(self, api: str | None, header: Callable[[str], str | None]) -> None:
        """PermissionDeniedError unless a call of ``api`` (None: an endpoint of no
        category) carries what its group needs; ``header`` looks up a header (lower-case
        name) of the call."""
        needed = self._needed.get(api) if api is not None else None
        if needed is not None and header(needed[0].lower()) != needed[1]:
            raise PermissionDeniedError(
                f"This {self._what} is restricted, expecting header '{needed[0]}'"
            )

    def check_grpc(self, method: str, header: Callable[[str], str | None]) -> None:
        """``check`` for a gRPC method given by its exact path."""
        self.check(_GRPC_APIS.get(method), header)
