"""The engine and the in-process API on real ONNX Runtime models, without sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from inferplex import InferenceRequest, RequestedOutput, Server, ServerConfig, Tensor
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import InvalidInputError, ModelNotFoundError, ModelNotReadyError
from inferplex.server import build_engine


def add_sub_request(rows: int = 1, **kwargs: object) -> InferenceRequest:
    a = np.arange(16 * rows, dtype=np.float32).reshape(rows, 16)
    b = np.ones((rows, 16), dtype=np.float32)
    return InferenceRequest(
        "add_sub",
        [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", b.shape, b)],
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
async def engine(test_repository: Path) -> InferenceEngine:
    engine = build_engine(ServerConfig(model_repository=test_repository))
    await engine.start()
    yield engine
    await engine.stop()


async def test_infer_computes_and_echoes_id(engine: InferenceEngine) -> None:
    response = await engine.infer(add_sub_request(3, id="req-7"))
    assert response.id == "req-7"
    assert response.model_version == "1"
    out0, out1 = response.outputs
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    np.testing.assert_array_equal(out0.data, a + 1)
    np.testing.assert_array_equal(out1.data, a - 1)
    assert out0.shape == (3, 16) and out0.datatype == "FP32"


async def test_requested_outputs_only(engine: InferenceEngine) -> None:
    response = await engine.infer(add_sub_request(outputs=[RequestedOutput("OUTPUT1")]))
    assert [o.name for o in response.outputs] == ["OUTPUT1"]


async def test_bytes_identity(engine: InferenceEngine) -> None:
    data = np.array([[b"abc", b"", "é".encode()]], dtype=object)
    request = InferenceRequest("identity_bytes", [Tensor("INPUT0", "BYTES", data.shape, data)])
    response = await engine.infer(request)
    assert response.outputs[0].data.tolist() == data.tolist()


async def test_errors(engine: InferenceEngine) -> None:
    with pytest.raises(ModelNotFoundError, match="Request for unknown model: 'nope' is not found"):
        await engine.infer(InferenceRequest("nope", []))
    with pytest.raises(ModelNotFoundError, match="'add_sub' version 9 is not found"):
        await engine.infer(add_sub_request(model_version="9"))
    with pytest.raises(ModelNotReadyError, match="'broken' is UNAVAILABLE"):
        await engine.infer(InferenceRequest("broken", []))
    with pytest.raises(InvalidInputError, match="max_batch_size 8"):
        await engine.infer(add_sub_request(9))


async def test_broken_model_is_in_the_index_with_its_reason(engine: InferenceEngine) -> None:
    index = {entry["name"]: entry for entry in engine.repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "TYPE_NOT_A_TYPE" in index["broken"]["reason"]
    assert index["add_sub"]["state"] == "READY"
    assert "broken" not in {e["name"] for e in engine.repository_index(ready_only=True)}


async def test_statistics_count_requests(engine: InferenceEngine) -> None:
    await engine.infer(add_sub_request(2))
    with pytest.raises(InvalidInputError):
        await engine.infer(add_sub_request(9))
    (stats,) = engine.model_statistics("add_sub")
    assert stats["inference_count"] == 2
    assert stats["execution_count"] == 1
    assert stats["inference_stats"]["success"]["count"] == 1
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert stats["batch_stats"][0]["batch_size"] == 2


async def test_slow_model_does_not_stall_another(engine: InferenceEngine) -> None:
    x = np.ones((1, 1), dtype=np.float32)
    slow = asyncio.create_task(
        engine.infer(InferenceRequest("slow", [Tensor("INPUT0", "FP32", x.shape, x)]))
    )
    await asyncio.sleep(0)  # the slow request is queued first
    order: list[str] = []
    slow.add_done_callback(lambda _: order.append("slow"))
    for _ in range(5):
        await engine.infer(add_sub_request())
    order.append("fast x5")
    await slow
    assert order == ["fast x5", "slow"]


def test_server_in_a_thread_serves_in_process(test_repository: Path) -> None:
    config = ServerConfig(
        model_repository=test_repository, http_port=0, grpc_port=0, metrics_port=0
    )
    with Server(config) as server:
        assert server.http_port and server.grpc_port and server.metrics_port
        response = server.infer(add_sub_request())
        assert response.outputs[0].data.shape == (1, 16)
