"""Tracing for the gRPC frontend: a server interceptor, installed only when tracing is on.

``ModelInfer`` calls get a server span (continuing a W3C ``traceparent`` sent as call
metadata) with the same children as over HTTP; other RPCs pass through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry.trace import Tracer

from inferplex.tracing.context import CURRENT
from inferplex.tracing.spans import RequestSpans, parent_context

_TRACED_METHOD = "/inference.GRPCInferenceService/ModelInfer"


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps the ModelInfer handler in a server span."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method != _TRACED_METHOD or handler.unary_unary is None:
            return handler
        carrier = {
            key: value
            for key, value in details.invocation_metadata or ()
            if key in ("traceparent", "tracestate") and isinstance(value, str)
        }
        return grpc.unary_unary_rpc_method_handler(
            self._traced(handler.unary_unary, carrier),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _traced(
        self, inner: Callable[[Any, Any], Awaitable[Any]], carrier: dict[str, str]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        tracer = self.tracer

        async def traced(request: Any, context: Any) -> Any:
            spans = RequestSpans(
                tracer,
                "ModelInfer",
                parent_context(carrier),
                {
                    "rpc.system": "grpc",
                    "rpc.service": "inference.GRPCInferenceService",
                    "rpc.method": "ModelInfer",
                },
            )
            if not spans.sampled:
                try:
                    return await inner(request, context)
                finally:
                    spans.span.end()
            record = spans.record
            record.received_ns = spans.start_ns  # the message arrives whole
            token = CURRENT.set(record)
            error = None
            try:
                return await inner(request, context)
            except BaseException as exc:  # an abort ends the call with an error status
                error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                CURRENT.reset(token)
                if record.model:
                    spans.span.set_attribute("inferplex.model.name", record.model)
                spans.finish(error)

        return traced
