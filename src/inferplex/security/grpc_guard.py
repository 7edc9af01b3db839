"""A grpc.aio server interceptor: API tokens per method scope, the management RPCs refused
when the management API has its own listener, and a metadata size limit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from inferplex.errors import HeadersTooLargeError, InferplexError, PermissionDeniedError
from inferplex.protocol.v2.errors import GRPC_STATUS
from inferplex.security.scopes import Scope, grpc_scope
from inferplex.security.tokens import TokenAuth

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class GrpcGuard(grpc.aio.ServerInterceptor):
    def __init__(
        self, auth: TokenAuth, *, management_elsewhere: str = "", max_header_bytes: int = 0
    ) -> None:
        """``management_elsewhere``: where the management API listens instead (its RPCs are
        then refused here); empty when this server serves them."""
        self._auth = auth
        self._management_elsewhere = management_elsewhere
        self._max_header_bytes = max_header_bytes

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        try:
            self._check(handler_call_details)
        except InferplexError as exc:
            return _refusal(handler_call_details, exc)
        return await continuation(handler_call_details)

    def _check(self, details: grpc.HandlerCallDetails) -> None:
        authorization = None
        size = 0
        for key, value in details.invocation_metadata or ():
            size += len(key) + len(value)
            if key == "authorization":
                authorization = value if isinstance(value, str) else value.decode("latin-1")
        if self._max_header_bytes and size > self._max_header_bytes:
            raise HeadersTooLargeError(
                f"request metadata of {size} bytes is above the limit of "
                f"{self._max_header_bytes} bytes (INFERPLEX_MAX_HEADER_BYTES)"
            )
        scope = grpc_scope(details.method)
        if scope is Scope.MANAGEMENT and self._management_elsewhere:
            raise PermissionDeniedError(
                f"{details.method.rsplit('/', 1)[-1]} is part of the management API, which is "
                f"served over HTTP on {self._management_elsewhere}, not on this port"
            )
        self._auth.check(scope, authorization)


def _refusal(details: grpc.HandlerCallDetails, error: InferplexError) -> grpc.RpcMethodHandler:
    """A handler that ends the call with the error's status. Request bytes are not parsed.
    ModelStreamInfer is the service's one stream-stream method; every other is unary-unary."""
    code, message = GRPC_STATUS[error.code], error.message

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(code, message)

    async def stream(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    if details.method.endswith("/ModelStreamInfer"):
        return grpc.stream_stream_rpc_method_handler(stream)
    return grpc.unary_unary_rpc_method_handler(unary)
