"""The gRPC server's guard: API tokens per method scope, and the management RPCs refused when
the management API has its own listener. It sees each call's method and metadata before the
request message is read."""

from __future__ import annotations

from collections.abc import Sequence

from inferplex.errors import PermissionDeniedError
from inferplex.security.scopes import Scope, grpc_scope
from inferplex.security.tokens import TokenAuth


class GrpcGuard:
    def __init__(self, auth: TokenAuth, *, management_elsewhere: str = "") -> None:
        """``management_elsewhere``: where the management API listens instead (its RPCs are
        then refused here); empty when this server serves them."""
        self._auth = auth
        self._management_elsewhere = management_elsewhere

    def __call__(self, method: str, metadata: Sequence[tuple[str, str | bytes]]) -> None:
        """Raises InferplexError (PERMISSION_DENIED, UNAUTHENTICATED) to refuse a call of
        ``method`` (its path) with ``metadata``."""
        scope = grpc_scope(method)
        if scope is Scope.MANAGEMENT and self._management_elsewhere:
            raise PermissionDeniedError(
                f"{method.rsplit('/', 1)[-1]} is part of the management API, which is "
                f"served over HTTP on {self._management_elsewhere}, not on this port"
            )
        authorization = None
        for key, value in metadata:
            if key == "authorization" and isinstance(value, str):
                authorization = value
        self._auth.check(scope, authorization)
