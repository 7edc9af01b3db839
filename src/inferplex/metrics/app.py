"""The metrics endpoint: a tiny ASGI app answering GET /metrics in Prometheus text format."""

from __future__ import annotations

from typing import Any

from inferplex.core.engine import InferenceEngine
from inferplex.metrics.collector import collect, render

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def create_metrics_app(engine: InferenceEngine) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            status, body, content_type = 200, render(collect(engine)), CONTENT_TYPE
        else:
            status, body = 404, b'{"error": "not found: try GET /metrics"}'
            content_type = b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app
