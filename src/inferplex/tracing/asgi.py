"""Tracing for the HTTP frontend: an ASGI wrapper around the V2 app, installed by the
server only when tracing is on (so the untraced server pays nothing at all).

Inference requests (``POST .../infer``) get a server span, continuing the caller's trace
when a W3C ``traceparent`` header comes with the request; the response carries the
``traceparent`` of the server span, so a client can find its trace. Other paths pass
through untouched.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import Tracer

from inferplex.tracing.context import CURRENT
from inferplex.tracing.spans import RequestSpans, parent_context, traceparent

Scope = dict[str, Any]


def _model_of(path: str) -> tuple[str, str]:
    """(model, version) of ``/v2/models/{m}[/versions/{v}]/infer``."""
    parts = path.strip("/").split("/")
    model = parts[2] if len(parts) > 3 else ""
    version = parts[4] if len(parts) > 5 and parts[3] == "versions" else ""
    return model, version


class TracedHttpApp:
    """Wraps an ASGI app; spans for inference requests only."""

    def __init__(self, app: Any, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "POST" or not path.endswith("/infer"):
            await self.app(scope, receive, send)
            return
        carrier = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope["headers"]
            if key in (b"traceparent", b"tracestate")
        }
        model, version = _model_of(path)
        attributes = {
            "http.request.method": "POST",
            "url.path": path,
            "inferplex.model.name": model,
            "rpc.system": "kserve_v2_rest",
        }
        if version:
            attributes["inferplex.model.version"] = version
        spans = RequestSpans(
            self.tracer, f"POST /v2/models/{model}/infer", parent_context(carrier), attributes
        )
        if not spans.sampled:
            await self.app(scope, receive, send)
            spans.span.end()
            return
        record = spans.record
        status = 500
        sent_ns = 0

        async def traced_receive() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request" and not message.get("more_body"):
                record.received_ns = time.perf_counter_ns()
            return message

        async def traced_send(message: dict[str, Any]) -> None:
            nonlocal status, sent_ns
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", []),
                        (b"traceparent", traceparent(spans.span).encode()),
                    ],
                }
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                sent_ns = time.perf_counter_ns()

        token = CURRENT.set(record)
        try:
            await self.app(scope, traced_receive, traced_send)
        finally:
            CURRENT.reset(token)
            spans.span.set_attribute("http.response.status_code", status)
            spans.finish(f"HTTP {status}" if status >= 500 else None, sent_ns)
