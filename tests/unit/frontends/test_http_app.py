"""The HTTP app driven directly through the ASGI adapter with a fake engine: what a healthy
server cannot show — lifespan, unexpected exceptions, bodies that arrive in pieces or not at
all."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from inferplex.config.server_config import ServerConfig
from inferplex.core.streaming import SingleResponse
from inferplex.datatypes import serialize_bytes
from inferplex.errors import ModelNotFoundError
from inferplex.frontends.http import create_http_app
from inferplex.shm import SharedMemoryRegistry
from inferplex.transport.asgi import AsgiAdapter
from inferplex.types import InferenceRequest, InferenceResponse, Tensor


# -- the ASGI app itself, with a fake engine -----------------------------------------------
class FakeEngine:
    """Just enough engine: an identity model 'echo', and 'boom' that fails unexpectedly."""

    shared_memory = SharedMemoryRegistry(enabled=False)

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return False

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if request.model_name == "boom":
            raise RuntimeError("the backend fell over")
        if request.model_name != "echo":
            raise ModelNotFoundError(f"unknown model '{request.model_name}'")
        outputs = [Tensor(t.name, t.datatype, t.shape, t.data) for t in request.inputs]
        return InferenceResponse(request.model_name, "1", outputs, id=request.id)

    async def stream(self, request: InferenceRequest) -> SingleResponse:
        return SingleResponse(functools.partial(self.infer, request))


class Exchange:
    """One ASGI request: feeds body chunks, records what the app sends."""

    def __init__(self, chunks: list[bytes], disconnect: bool = False) -> None:
        self.messages: list[dict[str, Any]] = [
            {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1 or disconnect}
            for i, c in enumerate(chunks)
        ]
        if disconnect:
            self.messages.append({"type": "http.disconnect"})
        self.received = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        message = self.messages[self.received]
        self.received += 1
        return message

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return self.sent[1]["body"]


@pytest.fixture
def app(tmp_path: Path) -> Any:
    config = ServerConfig(model_repository=tmp_path, max_request_bytes=1000)
    app = create_http_app(FakeEngine(), config)  # type: ignore[arg-type]
    return AsgiAdapter(app, config.max_request_bytes)  # as uvicorn calls it


async def call(
    app: Any,
    method: str,
    path: str,
    chunks: list[bytes],
    headers: list[Any] | None = None,
    **kw: Any,
) -> Exchange:
    exchange = Exchange(chunks, **kw)
    scope = {"type": "http", "method": method, "path": path, "headers": headers or []}
    await app(scope, exchange.receive, exchange.send)
    return exchange


async def test_lifespan_is_answered(app: Any) -> None:
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(incoming)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


async def test_one_start_and_one_body_with_content_length(app: Any) -> None:
    exchange = await call(app, "GET", "/v2/health/ready", [b""])
    assert [m["type"] for m in exchange.sent] == ["http.response.start", "http.response.body"]
    assert exchange.status == 503
    assert exchange.headers[b"content-length"] == b"0"


async def test_body_in_pieces_is_joined(app: Any) -> None:
    body = orjson.dumps(
        {"id": "x", "inputs": [{"name": "I", "shape": [3], "datatype": "INT8", "data": [1, 2, 3]}]}
    )
    exchange = await call(app, "POST", "/v2/models/echo/infer", [body[:7], body[7:20], body[20:]])
    assert exchange.status == 200
    assert orjson.loads(exchange.body)["outputs"][0]["data"] == [1, 2, 3]
    assert exchange.headers[b"content-length"] == str(len(exchange.body)).encode()


async def test_limit_stops_reading_at_the_first_chunk_over_it(app: Any) -> None:
    exchange = await call(app, "POST", "/v2/models/echo/infer", [b" " * 600] * 5)
    assert exchange.status == 413
    assert exchange.received == 2  # the rest is never pulled into memory
    assert b"1000" in exchange.body


async def test_first_piece_over_the_limit_is_refused(app: Any) -> None:
    exchange = await call(app, "POST", "/v2/models/echo/infer", [b" " * 1500, b" "])
    assert exchange.status == 413
    assert exchange.received == 1


async def test_declared_length_over_the_limit_reads_nothing(app: Any) -> None:
    headers = [(b"content-length", b"5000")]
    exchange = await call(app, "POST", "/v2/models/echo/infer", [b" " * 5000], headers)
    assert exchange.status == 413
    assert exchange.received == 0


async def test_unexpected_exception_is_a_logged_500(
    app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    body = orjson.dumps({"inputs": [{"name": "I", "shape": [1], "datatype": "FP32", "data": [1]}]})
    with caplog.at_level(logging.ERROR, logger="inferplex.frontends.http"):
        exchange = await call(app, "POST", "/v2/models/boom/infer", [body])
    assert exchange.status == 500
    assert "the backend fell over" in orjson.loads(exchange.body)["error"]
    assert any(record.exc_info for record in caplog.records)
    again = await call(app, "POST", "/v2/models/echo/infer", [body])
    assert again.status == 200


async def test_client_gone_mid_body_gets_no_response(app: Any) -> None:
    exchange = await call(app, "POST", "/v2/models/echo/infer", [b"{"], disconnect=True)
    assert exchange.sent == []


async def test_bad_content_length_header(app: Any) -> None:
    headers = [(b"content-length", b"12x")]
    exchange = await call(app, "POST", "/v2/models/echo/infer", [b"{}"], headers)
    assert exchange.status == 400
    assert b"Content-Length" in exchange.body


async def test_binary_request_through_the_app(app: Any) -> None:
    data = np.array([b"ab", b""], dtype=np.object_)
    raw = serialize_bytes(data)
    header = orjson.dumps(
        {"inputs": [{"name": "S", "shape": [2], "datatype": "BYTES",
                     "parameters": {"binary_data_size": len(raw)}}],
         "parameters": {"binary_data_output": True}}
    )  # fmt: skip
    headers = [(b"inference-header-content-length", str(len(header)).encode())]
    exchange = await call(app, "POST", "/v2/models/echo/infer", [header + raw], headers)
    assert exchange.status == 200
    assert exchange.headers[b"content-type"] == b"application/octet-stream"
    length = int(exchange.headers[b"inference-header-content-length"])
    assert exchange.body[length:] == raw
