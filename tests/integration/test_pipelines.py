"""Ensembles, cascades and size routing served by the engine on real ONNX Runtime models, and
over real sockets."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from examples import modelgen
from examples.build_models import build_camera_pipeline
from inferplex import InferenceRequest, RequestedOutput, ServerConfig, Tensor
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import InvalidInputError, ModelNotReadyError
from inferplex.server import build_engine
from inferplex_tools.benchtool.launch import RunningServer, start_server

#: A (16) and B (16): step 1 add_sub makes sum and diff, step 2 add_sub makes sum + diff = 2A
#: from them, while step 3 doubles B independently of both.
PIPE = """
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [16] },
  { name: "B" data_type: TYPE_FP32 dims: [16] }
]
output [
  { name: "twice_a" data_type: TYPE_FP32 dims: [16] },
  { name: "b2" data_type: TYPE_FP32 dims: [16] }
]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "sum" } output_map { key: "OUTPUT1" value: "diff" } },
  { model_name: "add_sub"
    input_map [ { key: "INPUT0" value: "sum" }, { key: "INPUT1" value: "diff" } ]
    output_map { key: "OUTPUT0" value: "twice_a" } },
  { model_name: "double"
    input_map { key: "INPUT0" value: "B" } output_map { key: "OUTPUT0" value: "b2" } }
] }
"""

#: step 2 feeds a 4-wide tensor to add_sub, which takes 16: it fails every request
PIPE_BAD = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [4] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [16] } ]
ensemble_scheduling { step [
  { model_name: "double"
    input_map { key: "INPUT0" value: "x" } output_map { key: "OUTPUT0" value: "x2" } },
  { model_name: "add_sub"
    input_map { key: "INPUT0" value: "x2" } input_map { key: "INPUT1" value: "x" }
    output_map { key: "OUTPUT0" value: "y" } }
] }
"""

PIPE_MISSING = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [4] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [4] } ]
ensemble_scheduling { step [
  { model_name: "nope"
    input_map { key: "INPUT0" value: "x" } output_map { key: "OUTPUT0" value: "y" } }
] }
"""

CASCADE = """
backend: cascade
max_batch_size: 8
input: [{name: INPUT0, data_type: FP32, dims: [4]}]
output:
- {name: OUTPUT0, data_type: FP32, dims: [4]}
- {name: answered_by, data_type: BYTES, dims: [1]}
cascade:
  light_model: light
  heavy_model: heavy
  confidence_output: OUTPUT0
  confidence: max
  threshold: 0.5
"""

ROUTING = """
backend: size_routing
max_batch_size: 8
input: [{name: INPUT0, data_type: FP32, dims: [-1]}]
output:
- {name: OUTPUT0, data_type: FP32, dims: [-1]}
- {name: answered_by, data_type: BYTES, dims: [1]}
size_routing:
  input_name: INPUT0
  rule:
  - {model_name: double, max_dims: [4]}
  - {model_name: tenfold}
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("pipelines")
    models = [
        modelgen.add_sub(repo),
        modelgen.scale(repo, "double", factor=2.0),
        modelgen.scale(repo, "tenfold", factor=10.0),
        modelgen.scale(repo, "light", factor=1.0, dims=(4,)),
        modelgen.scale(repo, "heavy", factor=10.0, dims=(4,)),
    ]
    for path in models:
        config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
        write_config(path.parent.parent, config)
    for name, text, fmt in (
        ("pipe", PIPE, "pbtxt"),
        ("pipe_bad", PIPE_BAD, "pbtxt"),
        ("pipe_missing", PIPE_MISSING, "pbtxt"),
        ("cascade", CASCADE, "yaml"),
        ("cascade_too_wide", CASCADE.replace("max_batch_size: 8", "max_batch_size: 16"), "yaml"),
        ("router", ROUTING, "yaml"),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / f"config.{fmt}").write_text(text)
    return repo


@pytest.fixture
async def engine(repository: Path) -> InferenceEngine:
    # one compute slot: a pipeline holding one while it waits on its steps would deadlock
    engine = build_engine(ServerConfig(model_repository=repository, max_concurrent_batches=1))
    await engine.start()
    yield engine
    await engine.stop()


def tensor(name: str, array: np.ndarray, datatype: str = "FP32") -> Tensor:
    return Tensor(name, datatype, array.shape, array)


def pipe_request(rows: int = 2, outputs: tuple[str, ...] = ()) -> InferenceRequest:
    a = np.arange(16 * rows, dtype=np.float32).reshape(rows, 16)
    b = np.full((rows, 16), 3.0, dtype=np.float32)
    wanted = [RequestedOutput(o) for o in outputs]
    return InferenceRequest("pipe", [tensor("A", a), tensor("B", b)], outputs=wanted)


async def infer(engine: InferenceEngine, request: InferenceRequest) -> dict[str, np.ndarray]:
    response = await asyncio.wait_for(engine.infer(request), 30)
    return {t.name: t.data for t in response.outputs}


def executions(engine: InferenceEngine, model: str) -> int:
    (stats,) = engine.model_statistics(model)
    return int(stats["inference_stats"]["success"]["count"])


async def test_ensemble_runs_the_dag(engine: InferenceEngine) -> None:
    out = await infer(engine, pipe_request(3))
    a = np.arange(48, dtype=np.float32).reshape(3, 16)
    np.testing.assert_array_equal(out["twice_a"], 2 * a)
    np.testing.assert_array_equal(out["b2"], np.full((3, 16), 6.0, dtype=np.float32))
    # the ensemble counts like any model; its steps count as the models they ran
    assert executions(engine, "pipe") == 1
    assert executions(engine, "add_sub") == 2 and executions(engine, "double") == 1


async def test_only_the_steps_the_outputs_need_run(engine: InferenceEngine) -> None:
    out = await infer(engine, pipe_request(outputs=("b2",)))
    assert list(out) == ["b2"]
    assert executions(engine, "add_sub") == 0 and executions(engine, "double") == 1


async def test_concurrent_pipelines_share_one_slot_without_deadlock(
    engine: InferenceEngine,
) -> None:
    assert engine.dispatcher.scheduler.slots == 1
    requests = [pipe_request(1) for _ in range(6)]
    answers = await asyncio.wait_for(
        asyncio.gather(*(engine.infer(r) for r in requests)), timeout=60
    )
    assert len(answers) == 6
    assert executions(engine, "pipe") == 6


async def test_a_failing_step_fails_the_request_naming_it(engine: InferenceEngine) -> None:
    x = np.ones((1, 4), dtype=np.float32)
    with pytest.raises(InvalidInputError, match=r"model 'pipe_bad': step 2 'add_sub' failed: .*"):
        await infer(engine, InferenceRequest("pipe_bad", [tensor("x", x)]))
    (stats,) = engine.model_statistics("pipe_bad")
    assert stats["inference_stats"]["fail"]["count"] == 1
    # an ensemble with an unknown step model is not ready (test_ensemble_readiness.py)
    with pytest.raises(
        ModelNotReadyError,
        match=r"model 'pipe_missing' is not ready: its step 1 'nope' is not available: "
        r"Request for unknown model: 'nope' is not found",
    ):
        await infer(engine, InferenceRequest("pipe_missing", [tensor("x", x)]))
    assert not engine.model_ready("pipe_missing")


async def test_cascade_sends_only_unconfident_rows_to_the_heavy_model(
    engine: InferenceEngine,
) -> None:
    rows = np.array(
        [[0.9, 0, 0, 0], [0.1, 0.2, 0, 0], [0, 0, 0.6, 0], [0, 0, 0, 0.4]], dtype=np.float32
    )
    out = await infer(engine, InferenceRequest("cascade", [tensor("INPUT0", rows)]))
    expected = rows.copy()
    expected[[1, 3]] *= 10
    np.testing.assert_allclose(out["OUTPUT0"], expected)
    assert out["answered_by"].reshape(-1).tolist() == [b"light", b"heavy", b"light", b"heavy"]
    assert executions(engine, "light") == 1
    (heavy,) = engine.model_statistics("heavy")
    assert heavy["inference_count"] == 2  # only the two unconfident rows


async def test_cascade_all_confident_never_calls_the_heavy_model(
    engine: InferenceEngine,
) -> None:
    rows = np.eye(4, dtype=np.float32)
    request = InferenceRequest(
        "cascade", [tensor("INPUT0", rows)], outputs=[RequestedOutput("OUTPUT0")]
    )
    out = await infer(engine, request)
    np.testing.assert_array_equal(out["OUTPUT0"], rows)
    assert executions(engine, "heavy") == 0


async def test_a_cascade_wider_than_its_light_model_is_not_ready(
    engine: InferenceEngine,
) -> None:
    """Its batches of up to 16 rows would fail in the light model (8 at most), request by
    request, while it said READY: it says why it cannot serve instead."""
    why = (
        "model 'cascade_too_wide' is not ready: its light model 'light' takes at most 8 rows "
        "a batch (its max_batch_size), fewer than the 16 of this model's max_batch_size"
    )
    assert not engine.model_ready("cascade_too_wide")
    (row,) = [r for r in engine.repository_index() if r["name"] == "cascade_too_wide"]
    assert row["state"] == "UNAVAILABLE" and row["reason"].startswith(why)
    with pytest.raises(ModelNotReadyError, match=re.escape(why)):
        await infer(engine, InferenceRequest("cascade_too_wide", [tensor("INPUT0", np.eye(4))]))
    assert engine.model_ready("cascade")


async def test_routing_by_input_size(engine: InferenceEngine) -> None:
    small = np.ones((2, 3), dtype=np.float32)
    large = np.ones((1, 6), dtype=np.float32)
    out = await infer(engine, InferenceRequest("router", [tensor("INPUT0", small)]))
    np.testing.assert_array_equal(out["OUTPUT0"], small * 2)
    assert out["answered_by"].reshape(-1).tolist() == [b"double", b"double"]
    out = await infer(engine, InferenceRequest("router", [tensor("INPUT0", large)]))
    np.testing.assert_array_equal(out["OUTPUT0"], large * 10)
    assert out["answered_by"].reshape(-1).tolist() == [b"tenfold"]


@pytest.fixture(scope="module")
def served(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(repository, tmp_path_factory.mktemp("served") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def test_ensemble_over_http_and_grpc(served: RunningServer) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    http = httpclient.InferenceServerClient(served.http_url)
    inputs = [httpclient.InferInput(n, [2, 16], "FP32") for n in ("A", "B")]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=True)
    result = http.infer("pipe", inputs)
    np.testing.assert_array_equal(result.as_numpy("twice_a"), 2 * a)
    config = http.get_model_config("pipe")
    assert config["platform"] == "ensemble"
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "add_sub",
        "add_sub",
        "double",
    ]
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    grpc_config = grpc.get_model_config("pipe", as_json=True)["config"]
    assert len(grpc_config["ensemble_scheduling"]["step"]) == 3  # perf_analyzer reads these
    rows = np.array([[0.1, 0, 0, 0]], dtype=np.float32)
    grpc_input = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    grpc_input.set_data_from_numpy(rows)
    answer = grpc.infer("cascade", [grpc_input])
    np.testing.assert_allclose(answer.as_numpy("OUTPUT0"), rows * 10)
    assert answer.as_numpy("answered_by").reshape(-1).tolist() == [b"heavy"]
    http.close()
    grpc.close()


def test_a_missing_step_model_is_named(served: RunningServer, repository: Path) -> None:
    http = httpclient.InferenceServerClient(served.http_url)
    x = httpclient.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with pytest.raises(Exception, match=r"step 2 'add_sub' failed") as caught:
        http.infer("pipe_bad", [x])
    assert getattr(caught.value, "status", lambda: None)() == "400"
    http.close()


async def test_the_camera_example_pipeline(tmp_path: Path) -> None:
    """examples/: face_detect -> face_embed beside object_classify and behaviour_classify
    answers as the four models called one after the other do."""
    build_camera_pipeline(tmp_path)
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    await engine.start()
    try:
        frames = np.random.default_rng(0).random((2, 3, 128, 128), dtype=np.float32)
        out = await infer(engine, InferenceRequest("camera_pipeline", [tensor("frame", frames)]))

        async def run(model: str, data: np.ndarray) -> np.ndarray:
            request = InferenceRequest(model, [tensor("image", data)])
            return (await infer(engine, request)).popitem()[1]

        face = await run("face_detect", frames)
        np.testing.assert_allclose(out["face_embedding"], await run("face_embed", face), atol=1e-5)
        np.testing.assert_allclose(out["objects"], await run("object_classify", frames), atol=1e-5)
        behaviour = await run("behaviour_classify", frames)
        np.testing.assert_allclose(out["behaviour"], behaviour, atol=1e-5)
        config = engine.model_config("camera_pipeline")
        assert config.instance_group[0].count == 8  # composite default: requests overlap
    finally:
        await engine.stop()


SLOW_PIPE = """
platform: "ensemble"
input [ { name: "x" data_type: TYPE_FP32 dims: [-1] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [-1] } ]
ensemble_scheduling { step [
  { model_name: "slow"
    input_map { key: "INPUT0" value: "x" } output_map { key: "OUTPUT0" value: "s" } },
  { model_name: "half"
    input_map { key: "INPUT0" value: "s" } output_map { key: "OUTPUT0" value: "y" } }
] }
"""


async def test_shutdown_lets_pipelines_in_flight_finish(tmp_path: Path) -> None:
    """The step models keep serving until the pipelines calling them have drained."""
    for path in (
        modelgen.slow(tmp_path, seconds=0.3),
        modelgen.scale(tmp_path, "half", factor=0.5, dims=()),
    ):
        write_config(path.parent.parent, modelgen.model_config(path))
    (tmp_path / "pipe" / "1").mkdir(parents=True)
    (tmp_path / "pipe" / "config.pbtxt").write_text(SLOW_PIPE)
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    await engine.start()
    x = np.array([2.0, 4.0], dtype=np.float32)
    pending = asyncio.create_task(infer(engine, InferenceRequest("pipe", [tensor("x", x)])))
    slow = engine.registry.route("slow")
    deadline = asyncio.get_running_loop().time() + 30
    while slow.idle and not pending.done():  # until step 1 runs on the slow model
        assert asyncio.get_running_loop().time() < deadline, "the slow step never started"
        await asyncio.sleep(0.005)
    await engine.stop()
    np.testing.assert_array_equal((await pending)["y"], x * 0.5)
