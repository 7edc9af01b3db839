"""Who may call what on one listener: the surface it serves (everything, inference only, or
management only), the API tokens, and Triton's restricted APIs. The one place that decides,
for HTTP and gRPC alike, given the endpoint that will actually run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from inferplex.errors import PermissionDeniedError
from inferplex.security.restricted import Restrictions
from inferplex.security.scopes import Scope, grpc_scope
from inferplex.security.tokens import Principal, TokenAuth

Surface = Literal["all", "inference", "management"]
Headers = Sequence[tuple[bytes, bytes]]


class Access:
    """The access rules of one listener."""

    def __init__(
        self,
        auth: TokenAuth,
        *,
        surface: Surface = "all",
        elsewhere: str = "",
        restrictions: Restrictions | None = None,
    ) -> None:
        """``elsewhere`` names where the other surface listens, for the refusal message;
        ``restrictions``: the restricted APIs of this listener's protocol."""
        self._auth = auth
        self._surface = surface
        self._elsewhere = elsewhere
        self._restrictions = restrictions if restrictions else None

    @property
    def enabled(self) -> bool:
        """False when every endpoint is open to everyone: callers may skip the check."""
        return self._auth.enabled or self._surface != "all" or self._restrictions is not None

    def check(self, scope: Scope, authorization: str | None, what: str) -> Principal:
        """The principal of a call of the endpoint ``what`` (of ``scope``) that may run with
        the ``Authorization`` value given; raise PermissionDeniedError or
        UnauthenticatedError."""
        if scope is not Scope.HEALTH and self._surface != "all":
            wanted = Scope.MANAGEMENT if self._surface == "management" else Scope.INFERENCE
            if scope is not wanted:
                raise PermissionDeniedError(
                    f"{what} is part of the {scope.value} API, which is served on "
                    f"{self._elsewhere}, not on this port"
                )
        return self._auth.check(scope, authorization)

    def http_check(self, scope: Scope, api: str | None, headers: Headers, what: str) -> Principal:
        """``check`` for an HTTP request with ``headers`` (names lower-case) of an endpoint
        of the API category ``api``."""

        def header(name: str) -> str | None:
            key = name.encode("latin-1")
            for found, value in headers:
                if found == key:
                    return value.decode("latin-1")
            return None

        if self._restrictions is not None:
            self._restrictions.check(api, header)
        return self.check(scope, header("authorization"), what)

    def grpc_guard(self, method: str, metadata: Sequence[tuple[str, str | bytes]]) -> Principal:
        """The gRPC server's guard: sees each call's resolved method path and metadata
        before the request message is read; returns the call's principal."""

        def header(name: str) -> str | None:
            for key, value in metadata:
                if key == name and isinstance(value, str):
                    return value
            return None

        if self._restrictions is not None:
            self._restrictions.check_grpc(method, header)
        return self.check(grpc_scope(method), header("authorization"), method.rsplit("/", 1)[-1])
