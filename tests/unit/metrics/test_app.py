"""The metrics port's routes, called as an ASGI app."""

from __future__ import annotations

import sys
import types
from typing import Any

import orjson
import pytest

from inferplex.engine.inference import InferenceEngine
from inferplex.metrics.app import CONTENT_TYPE, create_metrics_app


async def call(app: Any, path: str, method: str = "GET") -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    start, body = sent
    return start["status"], dict(start["headers"]), body["body"]


async def test_routes(engine: InferenceEngine) -> None:
    app = create_metrics_app(engine.snapshot)
    status, headers, body = await call(app, "/metrics")
    assert status == 200 and headers[b"content-type"] == CONTENT_TYPE
    assert b"# TYPE inferplex_request_duration_seconds histogram" in body
    for path, kind in (
        ("/dashboard", b"text/html"),
        ("/dashboard/", b"text/html"),
        ("/dashboard/dashboard.js", b"text/javascript"),
        ("/dashboard/dashboard.css", b"text/css"),
        ("/dashboard/data", b"application/json"),
    ):
        status, headers, body = await call(app, path)
        assert status == 200 and headers[b"content-type"].startswith(kind), path
        assert int(headers[b"content-length"]) == len(body) > 0
        assert headers[b"cache-control"] == b"no-store"
    assert {m["name"] for m in orjson.loads((await call(app, "/dashboard/data"))[2])["models"]} >= {
        "add_sub",
        "broken",
    }
    status, _, body = await call(app, "/dashboard/../metrics.py")
    assert status == 404 and b"try GET /metrics or GET /dashboard" in body
    status, _, body = await call(app, "/dashboard.js")
    assert status == 404
    status, _, body = await call(app, "/metrics", "POST")
    assert status == 405 and b"use GET" in body
    app.close()


async def test_gpu_metrics_off_leaves_nvml_unopened_and_the_interval_is_the_samplers(
    engine: InferenceEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[bool] = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: opened.append(True),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUUID=lambda handle: "GPU-0",
        nvmlShutdown=lambda: None,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    app = create_metrics_app(engine.snapshot, interval=2.0, gpu_metrics=False)
    assert not app.collector.gpus.available and not opened
    assert app.sampler.interval == 2.0
    app.close()
    app = create_metrics_app(engine.snapshot)  # the default reads the GPUs NVML sees
    assert app.collector.gpus.available and opened
    assert app.sampler.interval == 1.0
    app.close()
