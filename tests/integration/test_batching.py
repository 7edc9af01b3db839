"""Dynamic batching, queue policies, priorities and the response cache on real ONNX Runtime
models through the engine. Every test is decided by ordering or counts, never by timing: the
`slow` model (about 1 s a call) keeps its one instance busy while the test queues behind it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from inferplex import InferenceRequest, ServerConfig, Tensor
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import DeadlineExceededError, InvalidInputError, ServerBusyError
from inferplex.server import build_engine
from tests.support.repository import copy_model

SLOW_PLATFORM = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
SLOW_IO = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } } ]\n'
)
CONFIGS = {
    # add_sub: batches close only at 4 rows (preferred) within a long delay
    "add_sub_preferred": "dynamic_batching { preferred_batch_size: [ 4 ] "
    "max_queue_delay_microseconds: 30000000 }",
    "identity_preferred": "dynamic_batching { preferred_batch_size: [ 2 ] "
    "max_queue_delay_microseconds: 30000000 }",
    "slow_queue_1": "dynamic_batching { default_queue_policy { max_queue_size: 1 } }",
    "slow_timeout": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
    "default_timeout_microseconds: 100000 } }",
    "slow_override": "dynamic_batching { default_queue_policy { allow_timeout_override: true } }",
    "slow_priority": "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
    "add_sub_cached": "response_cache { enable: true }",
}


@pytest.fixture(scope="module")
def batching_repository(test_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("batching")
    for name, extra in CONFIGS.items():
        source = {"add": "add_sub", "identity": "identity_fp32", "slow": "slow"}[name.split("_")[0]]
        copy_model(test_repository / source, repo / name)
        config = repo / name / "config.pbtxt"
        if source == "slow":
            config.write_text(SLOW_PLATFORM + SLOW_IO + extra + "\n")
        else:
            text = config.read_text().replace(f'name: "{source}"', f'name: "{name}"')
            config.write_text(text + extra + "\n")
    return repo


@pytest.fixture
async def engine(batching_repository: Path) -> AsyncIterator[InferenceEngine]:
    engine = build_engine(ServerConfig(model_repository=batching_repository, cache_size=1 << 20))
    await engine.start()
    assert all(e["state"] == "READY" for e in engine.repository_index()), engine.repository_index()
    yield engine
    await engine.stop()


def fp32(name: str, array: np.ndarray) -> Tensor:
    array = np.asarray(array, dtype=np.float32)
    return Tensor(name, "FP32", array.shape, array)


def add_sub(model: str, a: np.ndarray) -> InferenceRequest:
    return InferenceRequest(model, [fp32("INPUT0", a), fp32("INPUT1", np.ones_like(a))])


def slow(model: str, value: float = 0.0, **parameters: int) -> InferenceRequest:
    return InferenceRequest(model, [fp32("INPUT0", [[value]])], parameters=dict(parameters))


async def started(engine: InferenceEngine, model: str) -> asyncio.Task:
    """Start a slow request and wait until its batch runs (the instance is then busy)."""
    task = asyncio.create_task(engine.infer(slow(model)))
    version = engine.registry.route(model)
    for _ in range(1000):
        if not version.idle:
            return task
        await asyncio.sleep(0.001)
    raise AssertionError("the slow request never started")


async def test_rows_merge_into_a_preferred_batch_and_split_back(engine: InferenceEngine) -> None:
    rows = [1, 1, 2]
    inputs = [np.full((n, 16), i, dtype=np.float32) for i, n in enumerate(rows)]
    responses = await asyncio.gather(
        *(engine.infer(add_sub("add_sub_preferred", a)) for a in inputs)
    )
    for a, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, a + 1)
        np.testing.assert_array_equal(response.outputs[1].data, a - 1)
    (stats,) = engine.model_statistics("add_sub_preferred")
    assert stats["execution_count"] == 1
    assert stats["inference_count"] == 4
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]
    assert stats["batch_close_reasons"] == {"preferred": 1}
    assert stats["inference_stats"]["queue"]["count"] == 3


async def test_different_non_batch_dims_never_share_a_batch(engine: InferenceEngine) -> None:
    widths = [3, 5, 3, 5]
    inputs = [np.arange(w, dtype=np.float32).reshape(1, w) + 10 * i for i, w in enumerate(widths)]
    responses = await asyncio.gather(
        *(engine.infer(InferenceRequest("identity_preferred", [fp32("INPUT0", a)])) for a in inputs)
    )
    for a, response in zip(inputs, responses, strict=True):
        np.testing.assert_array_equal(response.outputs[0].data, a)
    (stats,) = engine.model_statistics("identity_preferred")
    assert stats["execution_count"] == 2
    assert [b["batch_size"] for b in stats["batch_stats"]] == [2]
    assert stats["batch_stats"][0]["compute_infer"]["count"] == 2


async def test_full_queue_answers_at_once(engine: InferenceEngine) -> None:
    running = await started(engine, "slow_queue_1")
    queued = asyncio.create_task(engine.infer(slow("slow_queue_1")))
    await asyncio.sleep(0)
    with pytest.raises(ServerBusyError, match=r"'slow_queue_1' queue is full \(max_queue_size 1\)"):
        await engine.infer(slow("slow_queue_1"))
    await asyncio.gather(running, queued)  # both still answered


async def test_request_timing_out_in_the_queue_gets_an_error(engine: InferenceEngine) -> None:
    running = await started(engine, "slow_timeout")
    with pytest.raises(DeadlineExceededError, match="timed out after"):
        await engine.infer(slow("slow_timeout"))
    await running


async def test_deadline_that_cannot_be_met_is_rejected_early(engine: InferenceEngine) -> None:
    await engine.infer(slow("slow_override"))  # the model's execution time is now measured
    with pytest.raises(DeadlineExceededError):
        await engine.infer(slow("slow_override", timeout=100_000))
    (stats,) = engine.model_statistics("slow_override")
    assert stats["execution_count"] == 1  # nothing computed for the rejected request


async def test_higher_priority_runs_first(engine: InferenceEngine) -> None:
    running = await started(engine, "slow_priority")
    order: list[str] = []
    low = asyncio.create_task(engine.infer(slow("slow_priority", 1.0)))
    low.add_done_callback(lambda _: order.append("low"))
    await asyncio.sleep(0)
    high = asyncio.create_task(engine.infer(slow("slow_priority", 2.0, priority=1)))
    high.add_done_callback(lambda _: order.append("high"))
    await asyncio.gather(running, low, high)
    assert order == ["high", "low"]
    assert high.result().outputs[0].data.tolist() == [[2.0]]


async def test_bad_scheduling_parameters(engine: InferenceEngine) -> None:
    with pytest.raises(InvalidInputError, match="'timeout' must be a non-negative integer"):
        await engine.infer(slow("slow_timeout", timeout=-1))
    request = slow("slow_timeout")
    request.parameters["priority"] = "high"
    with pytest.raises(InvalidInputError, match="'priority'"):
        await engine.infer(request)


async def test_response_cache_answers_identical_requests(engine: InferenceEngine) -> None:
    a = np.full((1, 16), 3, dtype=np.float32)
    first = await engine.infer(add_sub("add_sub_cached", a))
    second = await engine.infer(add_sub("add_sub_cached", a))
    other = await engine.infer(add_sub("add_sub_cached", a + 1))
    np.testing.assert_array_equal(first.outputs[0].data, second.outputs[0].data)
    np.testing.assert_array_equal(other.outputs[0].data, a + 2)
    (stats,) = engine.model_statistics("add_sub_cached")
    assert stats["execution_count"] == 2
    assert stats["inference_stats"]["cache_hit"]["count"] == 1
    assert stats["inference_stats"]["cache_miss"]["count"] == 2
    assert stats["inference_stats"]["success"]["count"] == 3
