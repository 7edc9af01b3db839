"""Tracing for the gRPC frontend: a wrapper around the ModelInfer handler, installed only
when tracing is on.

``ModelInfer`` calls get a server span (continuing a W3C ``traceparent`` sent as call
metadata) with the same children as over HTTP; other RPCs are not wrapped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.trace import Tracer

from inferplex.tracing.context import CURRENT
from inferplex.tracing.spans import RequestSpans, parent_context

#: a gRPC method handler: (request, call) -> response; ``call.metadata()`` gives the
#: call's metadata as (key, value) pairs
Handler = Callable[[Any, Any], Awaitable[Any]]

_ATTRIBUTES = {
    "rpc.system": "grpc",
    "rpc.service": "inference.GRPCInferenceService",
    "rpc.method": "ModelInfer",
}


def traced_model_infer(tracer: Tracer, inner: Handler) -> Handler:
    """``inner`` (the ModelInfer handler) with a server span per call."""

    async def traced(request: Any, call: Any) -> Any:
        carrier = {
            key: value
            for key, value in call.metadata()
            if key in ("traceparent", "tracestate") and isinstance(value, str)
        }
        spans = RequestSpans(tracer, "ModelInfer", parent_context(carrier), _ATTRIBUTES)
        if not spans.sampled:
            try:
                return await inner(request, call)
            finally:
                spans.span.end()
        record = spans.record
        record.received_ns = spans.start_ns  # the message arrives whole
        token = CURRENT.set(record)
        error = None
        try:
            return await inner(request, call)
        except BaseException as exc:  # the call ends with an error status
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            CURRENT.reset(token)
            if record.model:
                spans.span.set_attribute("inferplex.model.name", record.model)
            spans.finish(error)

    return traced
