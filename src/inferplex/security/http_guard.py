"""An ASGI middleware in front of the HTTP frontend: header limits, API tokens, and which
surface (all endpoints, inference only, or management only) a listener serves."""

from __future__ import annotations

from typing import Any, Literal

import orjson

from inferplex.errors import (
    HeadersTooLargeError,
    InferplexError,
    PermissionDeniedError,
)
from inferplex.protocol.v2.errors import HTTP_STATUS
from inferplex.security.scopes import Scope, http_scope
from inferplex.security.tokens import TokenAuth

Surface = Literal["all", "inference", "management"]
App = Any


class HttpGuard:
    """Wraps an ASGI app. Costs one header scan per request; nothing when the app is used
    without tokens, separate surfaces or a header limit (the server then skips the guard)."""

    def __init__(
        self,
        app: App,
        auth: TokenAuth,
        *,
        surface: Surface = "all",
        elsewhere: str = "",
        max_header_bytes: int = 0,
    ) -> None:
        """``elsewhere`` names where the other surface listens, for the refusal message."""
        self._app = app
        self._auth = auth
        self._surface = surface
        self._elsewhere = elsewhere
        self._max_header_bytes = max_header_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        try:
            self._check(scope)
        except InferplexError as exc:
            body = orjson.dumps({"error": exc.message})
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            if exc.code is HeadersTooLargeError.code:
                headers.append((b"connection", b"close"))
            else:
                headers.append((b"www-authenticate", b"Bearer"))
            await send(
                {"type": "http.response.start", "status": HTTP_STATUS[exc.code], "headers": headers}
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self._app(scope, receive, send)

    def _check(self, scope: dict[str, Any]) -> None:
        authorization = None
        size = 0
        for key, value in scope["headers"]:
            size += len(key) + len(value)
            if key == b"authorization":
                authorization = value.decode("latin-1")
        if self._max_header_bytes and size > self._max_header_bytes:
            raise HeadersTooLargeError(
                f"request headers of {size} bytes are above the limit of "
                f"{self._max_header_bytes} bytes (INFERPLEX_MAX_HEADER_BYTES)"
            )
        kind = http_scope(scope["path"])
        if kind is not Scope.HEALTH and self._surface != "all":
            wanted = Scope.MANAGEMENT if self._surface == "management" else Scope.INFERENCE
            if kind is not wanted:
                raise PermissionDeniedError(
                    f"{scope['path']} is part of the {kind.value} API, which is served on "
                    f"{self._elsewhere}, not on this port"
                )
        self._auth.check(kind, authorization)
