"""The metrics endpoint: a tiny ASGI app answering GET /metrics in Prometheus text format."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from inferplex.core.engine import InferenceEngine
from inferplex.metrics.collector import EngineCollector


def create_metrics_app(engine: InferenceEngine) -> Any:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/metrics" and scope["method"] == "GET":
            status, body, content_type = 200, generate_latest(registry), CONTENT_TYPE_LATEST
        else:
            status, body, content_type = (
                404,
                b'{"error": "not found: try GET /metrics"}',
                ("application/json"),
            )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app
