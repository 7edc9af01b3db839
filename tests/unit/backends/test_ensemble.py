"""Ensemble configs: reading ensemble_scheduling, and the DAG checks made at load."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferplex.backends.base import InstanceSpec
from inferplex.backends.ensemble import EnsembleBackend, EnsembleGraph, failure
from inferplex.backends.step_gates import StepGate
from inferplex.backends.worker.process_backend import WorkerError
from inferplex.config.model_config import ModelConfig
from inferplex.config.pbtxt import parse_pbtxt
from inferplex.config.readers import config_from_dict
from inferplex.errors import (
    ConfigError,
    ErrorCode,
    InvalidInputError,
    ModelExecutionError,
    ModelNotReadyError,
)
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

CAMERA = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "frame" data_type: TYPE_FP32 dims: [ 3, 64, 64 ] } ]
output [
  { name: "embedding" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "objects" data_type: TYPE_FP32 dims: [ 10 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "face_detect"
      model_version: -1
      input_map { key: "image" value: "frame" }
      output_map { key: "crop" value: "face" }
    },
    {
      model_name: "face_embed"
      model_version: 2
      input_map { key: "image" value: "face" }
      output_map { key: "embedding" value: "embedding" }
    },
    {
      model_name: "objects"
      input_map { key: "image" value: "frame" }
      output_map [ { key: "logits" value: "objects" } ]
    }
  ]
}
"""


def camera(**changes: Any) -> ModelConfig:
    raw = parse_pbtxt(CAMERA, "camera/config.pbtxt")
    raw.update(changes)
    raw = {k: v for k, v in raw.items() if v is not None}
    return config_from_dict(raw, "camera", "camera/config.pbtxt")


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> dict[str, Any]:
    return {"model_name": model, "input_map": inputs, "output_map": outputs}


def test_pbtxt_and_triton_rendering() -> None:
    config = camera()
    assert config.unsupported_fields == ()
    assert config.ensemble_scheduling is not None
    steps = config.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["face_detect", "face_embed", "objects"]
    assert steps[1].model_version == 2 and steps[2].model_version == -1
    assert steps[0].input_map == {"image": "frame"}
    rendered = config.to_triton_dict()["ensemble_scheduling"]["step"][2]
    assert rendered["output_map"] == {"logits": "objects"} and rendered["model_version"] == -1


def test_yaml_style_maps_are_read_too() -> None:
    raw = {
        "platform": "ensemble",
        "input": [{"name": "x", "data_type": "FP32", "dims": [1]}],
        "output": [{"name": "y", "data_type": "FP32", "dims": [1]}],
        "ensemble_scheduling": {
            "step": [
                {
                    "model_name": "m",
                    "input_map": [{"key": "INPUT0", "value": "x"}],
                    "output_map": {"OUTPUT0": "y"},
                }
            ]
        },
    }
    config = config_from_dict(raw, "e", "e/config.yaml")
    assert config.ensemble_scheduling is not None
    assert config.ensemble_scheduling.step[0].input_map == {"INPUT0": "x"}


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"ensemble_scheduling.step\[0\].model_name: is req"):
        camera(ensemble_scheduling={"step": [{"model_nme": "x"}]})
    with pytest.raises(ConfigError, match=r"step\[0\].input_map.i: .*valid string"):
        camera(ensemble_scheduling={"step": [step("a", {"i": 3}, {"o": "x"})]})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"ensemble_scheduling\.step: .*at least 1"):
        camera(ensemble_scheduling={"step": []})


def test_graph_plans_only_the_steps_an_output_needs() -> None:
    graph = EnsembleGraph(camera())
    plan = graph.plan(["embedding"])
    assert [s.model for s in plan.steps] == ["face_detect", "face_embed"]
    assert plan.requested == {1: ("crop",), 2: ("embedding",)}
    assert plan.steps[1].version == "2" and plan.steps[0].version == ""
    assert [s.model for s in graph.plan(["objects", "embedding"]).steps] == [
        "face_detect",
        "face_embed",
        "objects",
    ]


def test_each_step_knows_the_longest_chain_it_starts() -> None:
    chain = [
        step("a", {"i": "frame"}, {"o": "x"}),
        step("b", {"i": "x"}, {"o": "y"}),
        step("c", {"i": "y", "j": "frame"}, {"o": "embedding"}),
        step("d", {"i": "x"}, {"o": "objects"}),
    ]
    graph = EnsembleGraph(camera(ensemble_scheduling={"step": chain}))
    assert graph.plan(["embedding", "objects"]).precedence == {1: 3, 2: 2, 3: 1, 4: 1}
    # counted within the plan: without "c" wanted, "b" is not planned and "a" heads two steps
    assert graph.plan(["objects"]).precedence == {1: 2, 4: 1}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        (
            [
                step("a", {"i": "nowhere"}, {"o": "embedding"}),
                step("b", {"i": "frame"}, {"o": "objects"}),
            ],
            r"step 1 'a' input 'i' reads ensemble tensor 'nowhere', which is neither an input",
        ),
        (
            [
                step("a", {"i": "frame"}, {"o": "embedding"}),
                step("b", {"i": "frame"}, {"o": "embedding"}),
            ],
            r"step 2 'b' output 'o' writes ensemble tensor 'embedding', which step 1 'a' already",
        ),
        (
            [step("a", {"i": "frame"}, {"o": "frame"})],
            r"step 1 'a' output 'o' writes ensemble tensor 'frame', which is an input",
        ),
        (
            [step("a", {"i": "frame"}, {"o": "embedding"})],
            r"output 'objects' of the ensemble is made by no step",
        ),
        (
            [
                step("a", {"i": "frame", "j": "t2"}, {"o": "t1", "p": "embedding"}),
                step("b", {"i": "t1"}, {"o": "t2"}),
                step("c", {"i": "frame"}, {"o": "objects"}),
            ],
            r"cycle .*step 1 'a', step 2 'b' each wait",
        ),
        ([step("a", {}, {"o": "embedding"})], r"step 1 'a' has an empty input_map"),
        ([step("a", {"i": "frame"}, {})], r"step 1 'a' has an empty output_map"),
    ],
)
def test_dag_errors_name_the_step(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EnsembleGraph(camera(ensemble_scheduling={"step": steps}))


def test_an_ensemble_needs_steps() -> None:
    with pytest.raises(ConfigError, match="needs ensemble_scheduling"):
        EnsembleGraph(camera(ensemble_scheduling=None))


def test_failure_keeps_the_code_and_names_the_context() -> None:
    error = failure("model 'e': step 2 'b'", ModelNotReadyError("model 'b' is LOADING"))
    assert isinstance(error, ModelNotReadyError)
    assert error.message == "model 'e': step 2 'b' failed: model 'b' is LOADING"
    assert str(error) == error.message
    other = failure("model 'e': step 1 'a'", ValueError("boom"))
    assert isinstance(other, ModelExecutionError) and other.message.endswith("failed: boom")
    # an error whose __init__ takes more than the message (a Python step's own code)
    worker = failure("model 'e': step 1 'a'", WorkerError("bad mode", ErrorCode.INVALID_ARGUMENT))
    assert isinstance(worker, WorkerError) and worker.code is ErrorCode.INVALID_ARGUMENT
    assert worker.message == "model 'e': step 1 'a' failed: bad mode"


class ScriptedCaller:
    """Hands out a future per submitted step request; the test answers them."""

    def __init__(self) -> None:
        self.submitted: list[tuple[InferenceRequest, Future[InferenceResponse]]] = []
        self.precedence: dict[str, int] = {}  # model -> the precedence it was submitted with

    def submit(self, request: InferenceRequest, precedence: int = 0) -> Future[InferenceResponse]:
        future: Future[InferenceResponse] = Future()
        self.submitted.append((request, future))
        self.precedence[request.model_name] = precedence
        return future

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        raise AssertionError("an ensemble submits its steps")

    def wait_for(self, count: int) -> list[str]:
        deadline = time.monotonic() + 10
        while len(self.submitted) < count:
            assert time.monotonic() < deadline, f"only {len(self.submitted)} steps submitted"
            time.sleep(0.001)
        return [r.model_name for r, _ in self.submitted]

    def answer(self, index: int, output: str, value: float) -> None:
        request, future = self.submitted[index]
        data = np.full((1, 4), value, dtype=np.float32)
        future.set_result(
            InferenceResponse(request.model_name, "1", [Tensor(output, "FP32", data.shape, data)])
        )


def test_independent_steps_are_submitted_together() -> None:
    caller = ScriptedCaller()
    ensemble = EnsembleBackend(Path("."), camera(), InstanceSpec(caller=caller))
    frame = np.zeros((1, 3, 64, 64), dtype=np.float32)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(ensemble.execute, {"frame": frame}, ["embedding", "objects"])
        # both steps that read only the frame start before either answers
        assert caller.wait_for(2) == ["face_detect", "objects"]
        face_request = caller.submitted[0][0]
        assert [t.name for t in face_request.inputs] == ["image"]
        assert face_request.inputs[0].data is frame  # passed on, not copied
        assert [o.name for o in face_request.outputs] == ["crop"]
        caller.answer(0, "crop", 1.0)
        assert caller.wait_for(3)[2] == "face_embed"
        assert caller.submitted[2][0].model_version == "2"
        caller.answer(2, "embedding", 2.0)
        caller.answer(1, "logits", 3.0)
        out = running.result(10)
    assert out["embedding"][0, 0] == 2.0 and out["objects"][0, 0] == 3.0
    # the face detector heads the longest chain: the dispatcher starts it first
    assert caller.precedence == {"face_detect": 2, "objects": 1, "face_embed": 1}


def test_a_failing_step_cancels_the_rest() -> None:
    caller = ScriptedCaller()
    ensemble = EnsembleBackend(Path("."), camera(), InstanceSpec(caller=caller))
    frame = np.zeros((1, 3, 64, 64), dtype=np.float32)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(ensemble.execute, {"frame": frame}, ["embedding", "objects"])
        caller.wait_for(2)
        caller.submitted[0][1].set_exception(InvalidInputError("input 'image' is too small"))
        with pytest.raises(
            InvalidInputError,
            match="model 'camera': step 1 'face_detect' failed: input 'image' is too small",
        ):
            running.result(10)
    assert caller.submitted[1][1].cancelled()


def test_a_step_nothing_needs_is_reported_and_never_planned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = [
        step("a", {"i": "frame"}, {"o": "embedding"}),
        step("b", {"i": "frame"}, {"o": "objects"}),
        step("idle", {"i": "frame"}, {"o": "unused"}),
    ]
    graph = EnsembleGraph(camera(ensemble_scheduling={"step": steps}))
    assert "step 3 'idle' make(s) nothing the ensemble's outputs need" in caplog.text
    assert [s.model for s in graph.plan(["embedding", "objects"]).steps] == ["a", "b"]


def test_max_inflight_requests_is_read_and_rendered() -> None:
    """Triton's ModelEnsembling field 2 (max_inflight_requests), as its config.pbtxt writes it."""
    text = CAMERA.replace(
        "ensemble_scheduling {", "ensemble_scheduling {\n  max_inflight_requests: 1"
    )
    config = config_from_dict(parse_pbtxt(text, "c/config.pbtxt"), "camera", "c/config.pbtxt")
    assert config.unsupported_fields == ()
    assert config.ensemble_scheduling is not None
    assert config.ensemble_scheduling.max_inflight_requests == 1
    assert config.to_triton_dict()["ensemble_scheduling"]["max_inflight_requests"] == 1
    assert camera().to_triton_dict()["ensemble_scheduling"]["max_inflight_requests"] == 0


def test_max_inflight_requests_bounds_each_step_across_requests_and_instances(
    tmp_path: Path,
) -> None:
    """With max_inflight_requests 1, a second request (on another instance of the ensemble)
    starts a step only once the first request's call to that step completed."""
    caller = ScriptedCaller()
    limited = camera(
        ensemble_scheduling={
            "step": camera().to_triton_dict()["ensemble_scheduling"]["step"],
            "max_inflight_requests": 1,
        }
    )
    instances = [EnsembleBackend(tmp_path, limited, InstanceSpec(caller=caller)) for _ in range(2)]
    frame = np.zeros((1, 3, 64, 64), dtype=np.float32)
    wanted = ["embedding", "objects"]
    with ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(instances[0].execute, {"frame": frame}, wanted)
            assert caller.wait_for(2) == ["face_detect", "objects"]
            second = pool.submit(instances[1].execute, {"frame": frame}, wanted)
            time.sleep(0.2)
            assert len(caller.submitted) == 2  # both steps of the second request wait for a slot
            caller.answer(1, "logits", 3.0)  # the first request's "objects" completes
            assert caller.wait_for(3)[2] == "objects"  # its slot goes to the second request
            time.sleep(0.1)
            assert len(caller.submitted) == 3  # face_detect: still the first request's alone
            caller.answer(0, "crop", 1.0)
            names = caller.wait_for(5)
            assert sorted(names[3:]) == ["face_detect", "face_embed"]
            for index in (3, 4):
                output = "crop" if names[index] == "face_detect" else "embedding"
                caller.answer(index, output, 2.0)
            assert first.result(10)["embedding"][0, 0] == 2.0
            assert caller.wait_for(6)[5] == "face_embed"
            caller.answer(2, "logits", 3.0)
            caller.answer(5, "embedding", 4.0)
            assert second.result(10)["embedding"][0, 0] == 4.0
        finally:  # a failed check leaves no execute waiting on a step forever
            for _, future in caller.submitted:
                if not future.done():
                    future.set_exception(ModelNotReadyError("the test is over"))


def test_a_step_gate_serves_in_order_and_forgets_who_gave_up() -> None:
    gate = StepGate(1)
    held = gate.acquire()
    gave_up, waiting = gate.acquire(), gate.acquire()
    assert held.done() and not gave_up.done() and not waiting.done()
    gate.abandon(gave_up)
    gate.release()
    assert waiting.done() and gave_up.cancelled()
    gate.abandon(waiting)  # handed over already: its slot is released
    assert gate.acquire().done()
