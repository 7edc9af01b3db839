"""The metrics port: a tiny ASGI app.

GET /metrics           Prometheus text format (every family of metrics/collector.py)
GET /dashboard         the live dashboard page (and its .js / .css next to it)
GET /dashboard/data    the JSON the page polls once a second
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from inferplex.metrics.collector import Collector
from inferplex.metrics.dashboard import STATIC_FILES, dashboard_data, load_static
from inferplex.metrics.exposition import render
from inferplex.metrics.http2 import Http2Counts
from inferplex.metrics.sampler import Activity, Sampler, Snapshot
from inferplex.transport.interface import HttpServing

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
_JSON = b"application/json"


class MetricsApp:
    """The app of the metrics port: native (``transport.interface.NativeApp``, as the servers
    call it) and ASGI 3. Start the sampler with the server's loop."""

    def __init__(
        self,
        snapshot: Snapshot,
        sampler: Sampler | None = None,
        listeners: Sequence[HttpServing] = (),
        http2: Http2Counts | None = None,
        activity: Activity | None = None,
        gpu_metrics: bool = True,
    ) -> None:
        self.snapshot = snapshot
        self.sampler = sampler or Sampler(snapshot, activity=activity)
        self.collector = Collector(snapshot, self.sampler, listeners, http2, gpu_metrics)
        self._static = load_static()

    def refusal(self, request: Any) -> None:
        """Nothing is refused before its body (``transport.interface.NativeApp``)."""
        return None

    async def respond(self, request: Any) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """The answer to a request (``transport.interface.NativeApp``)."""
        status, body, content_type = self._answer(request.method, request.path)
        return status, body, [(b"content-type", content_type), (b"cache-control", b"no-store")]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        status, body, content_type = self._answer(scope["method"], scope["path"])
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _answer(self, method: str, path: str) -> tuple[int, bytes, bytes]:
        if method != "GET":
            return 405, orjson.dumps({"error": f"method {method} not allowed: use GET"}), _JSON
        if path == "/metrics":
            return 200, render(self.collector.collect()), CONTENT_TYPE
        if path in ("/dashboard", "/dashboard/"):
            return 200, self._static["index.html"], STATIC_FILES["index.html"]
        if path == "/dashboard/data":
            document = dashboard_data(self.snapshot(), self.sampler, self.collector.gpus.read())
            return 200, orjson.dumps(document), _JSON
        name = path.removeprefix("/dashboard/")
        if name in STATIC_FILES and name != path:
            return 200, self._static[name], STATIC_FILES[name]
        message = f"not found: {path}; try GET /metrics or GET /dashboard"
        return 404, orjson.dumps({"error": message}), _JSON

    def close(self) -> None:
        self.sampler.stop()
        self.collector.close()


def create_metrics_app(
    snapshot: Snapshot,
    sampler: Sampler | None = None,
    listeners: Sequence[HttpServing] = (),
    http2: Http2Counts | None = None,
    activity: Activity | None = None,
    *,
    interval: float = 1.0,
    gpu_metrics: bool = True,
) -> MetricsApp:
    """The metrics port's application over what ``snapshot`` (the engine's) reads; ``sampler``
    defaults to a sampler every ``interval`` seconds that skips its walk over the models while
    ``activity`` (the engine's) stands still; ``listeners``, the HTTP servers whose counters
    it reports; ``http2``, the gRPC port's; ``gpu_metrics`` False leaves the GPUs unread."""
    sampler = sampler or Sampler(snapshot, interval, activity=activity)
    return MetricsApp(snapshot, sampler, listeners, http2, activity, gpu_metrics)
