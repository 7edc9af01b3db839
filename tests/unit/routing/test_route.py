"""Routes on fake models: splits, stickiness, shadow recording, variants and degradation."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from inferplex.errors import (
    InvalidInputError,
    ModelExecutionError,
    ModelNotFoundError,
    ModelNotReadyError,
)
from inferplex.routing.config import parse_routing
from inferplex.routing.route import Route
from inferplex.types import InferenceRequest, InferenceResponse, Tensor


class Models:
    """Fake served models: ``y = x`` (the shadow ``s`` adds 0.001); failures, queues and
    breakers as the test sets them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.failing: set[str] = set()
        self.queues: dict[str, int] = {}
        self.unready: set[str] = set()
        self.open: set[str] = set()
        self.gate: asyncio.Event | None = None

    async def serve(self, request: InferenceRequest) -> InferenceResponse:
        self.calls.append((request.model_name, request.model_version))
        if request.model_name == "s" and self.gate is not None:
            await self.gate.wait()
        if request.model_name in self.failing:
            raise ModelExecutionError(f"model '{request.model_name}' failed")
        x = request.inputs[0].data
        y = x + 0.001 if request.model_name == "s" else x.copy()
        return InferenceResponse(
            request.model_name, request.model_version or "1", [Tensor("y", "FP32", y.shape, y)]
        )

    def queued(self, model: str, version: str) -> int:
        if model in self.unready:
            raise ModelNotReadyError(f"model '{model}' is LOADING")
        return self.queues.get(model, 0)

    def breaker_open(self, model: str) -> bool:
        return model in self.open


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(models: Models, route: dict[str, object], clock: Clock | None = None) -> Route:
    config = parse_routing({"routes": {"r": route}}).routes["r"]
    return Route("r", config, models.serve, models.queued, models.breaker_open, clock or Clock())


def request(value: float = 1.0, **parameters: object) -> InferenceRequest:
    x = np.full((1, 4), value, dtype=np.float32)
    return InferenceRequest("r", [Tensor("x", "FP32", x.shape, x)], parameters=parameters)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_split_sends_each_request_to_one_target_by_weight() -> None:
    models = Models()
    route = make(
        models,
        {
            "targets": [{"model": "a", "version": 1, "weight": 80}, {"model": "b", "weight": 20}],
            "seed": 42,
        },
    )
    n = 3000
    for _ in range(n):
        response = await route.infer(request(id="x"))
        assert response.parameters == {}  # a split route adds nothing: model_name says it
    to_b = models.calls.count(("b", ""))
    assert models.calls.count(("a", "1")) + to_b == n
    assert abs(to_b - n * 0.2) <= 5 * math.sqrt(n * 0.2 * 0.8)
    stats = route.statistics()
    assert stats["requests"] == n
    assert [t["requests"] for t in stats["targets"]] == [n - to_b, to_b]
    assert stats["targets"][0]["weight"] == 80 and stats["targets"][1]["name"] == "b"
    assert set(stats["targets"][0]["latency_ms"]) == {"mean", "p50", "p90", "p99", "max"}


async def test_sticky_parameter_pins_a_key_to_a_target() -> None:
    models = Models()
    route = make(
        models, {"targets": [{"model": "a"}, {"model": "b"}], "sticky": {"parameter": "user"}}
    )
    for key in range(50):
        for _ in range(3):
            await route.infer(request(user=key))
        assert len(set(models.calls[-3:])) == 1
    assert {m for m, _ in models.calls} == {"a", "b"}


async def test_a_route_has_no_versions_and_failures_are_counted() -> None:
    models = Models()
    route = make(models, {"targets": [{"model": "a"}]})
    versioned = request()
    versioned.model_version = "2"
    with pytest.raises(ModelNotFoundError, match="'r' is a route: it has no versions"):
        await route.infer(versioned)
    models.failing.add("a")
    with pytest.raises(ModelExecutionError):
        await route.infer(request())
    assert route.statistics()["targets"][0]["failures"] == 1


async def test_shadow_records_latency_and_difference_and_never_answers() -> None:
    models = Models()
    route = make(models, {"targets": [{"model": "a"}], "shadow": {"model": "s"}})
    for i in range(5):
        response = await route.infer(request(float(i + 1)))
        assert response.model_name == "a"
    await settle()
    shadow = route.statistics()["shadow"]
    assert shadow["mirrored"] == 5 and shadow["compared"] == 5 and shadow["errors"] == 0
    assert shadow["max_abs_diff"]["max"] == pytest.approx(0.001, rel=1e-3)
    assert 0.99999 < shadow["cosine"]["min"] <= 1.0
    assert shadow["latency_ms"]["p50"] >= 0 and shadow["primary_latency_ms"]["p50"] >= 0
    assert models.calls.count(("s", "")) == 5


async def test_shadow_failures_are_counted_not_raised_and_a_failed_primary_is_not_compared() -> (
    None
):
    models = Models()
    route = make(models, {"targets": [{"model": "a"}], "shadow": {"model": "s"}})
    models.failing.add("s")
    await route.infer(request())
    await settle()
    models.failing = {"a"}
    with pytest.raises(ModelExecutionError):
        await route.infer(request())
    await settle()
    shadow = route.statistics()["shadow"]
    assert shadow["errors"] == 1 and "model 's' failed" in shadow["last_error"]
    assert shadow["compared"] == 0 and shadow["mirrored"] == 1  # not the failed request
    assert not shadow["latency_ms"]


async def test_shadow_is_bounded_and_closes() -> None:
    models = Models()
    models.gate = asyncio.Event()  # the shadow hangs until opened
    route = make(
        models, {"targets": [{"model": "a"}], "shadow": {"model": "s", "max_in_flight": 2}}
    )
    for _ in range(5):
        await route.infer(request())  # never waits for the shadow
    stats = route.statistics()["shadow"]
    assert stats["mirrored"] == 2 and stats["skipped"] == 3
    await route.close()
    assert route.shadow is not None and not route.shadow._tasks


async def test_variants_degrade_on_queue_not_ready_and_breaker() -> None:
    models = Models()
    route = make(
        models,
        {
            "variants": [{"model": "f32", "label": "fp32"}, {"model": "i8", "label": "int8"}],
            "degrade": {"max_queue": 4},
        },
    )
    response = await route.infer(request())
    assert response.parameters == {"variant": "fp32"} and response.model_name == "f32"
    models.queues["f32"] = 4
    response = await route.infer(request())
    assert response.parameters == {"variant": "int8"} and response.model_name == "i8"
    assert route.statistics()["last_degrade_reason"] == "queue 4 >= 4"
    # the client may refuse a degraded answer
    response = await route.infer(request(allow_degraded=False))
    assert response.parameters == {"variant": "fp32"}
    models.queues["f32"] = 0
    models.open.add("f32")
    assert (await route.infer(request())).parameters == {"variant": "int8"}
    models.open.clear()
    models.unready.add("f32")
    assert (await route.infer(request())).parameters == {"variant": "int8"}
    stats = route.statistics()
    assert stats["degraded"] == 3 and stats["last_degrade_reason"] == "not ready"
    assert [t["requests"] for t in stats["targets"]] == [2, 3]


async def test_variants_degrade_while_the_primary_p99_is_over_target() -> None:
    clock = Clock()
    models = Models()
    route = make(
        models,
        {
            "variants": [{"model": "f32"}, {"model": "i8"}],
            "degrade": {"p99_ms": 10, "window_s": 5, "min_samples": 3},
        },
        clock,
    )
    policy = route._policy
    assert policy is not None
    for _ in range(3):  # the primary measured slow
        policy.record(0, 0.050)
    clock.now = 1.0
    assert (await route.infer(request())).model_name == "i8"
    assert "p99 " in route.statistics()["last_degrade_reason"]
    # the slow samples age out of the window: back to the primary, which is measured again
    clock.now = 7.0
    assert (await route.infer(request())).model_name == "f32"


async def test_readiness_and_primary() -> None:
    models = Models()
    split = make(models, {"targets": [{"model": "a"}, {"model": "b", "weight": 0}]})
    assert split.ready("", lambda m, v: m == "a")
    assert not split.ready("", lambda m, v: m == "b")
    variants = make(models, {"variants": [{"model": "a"}, {"model": "b"}]})
    assert variants.ready("", lambda m, v: m == "b")  # degrades to b
    assert variants.primary().model == "a"
    with pytest.raises(ModelNotFoundError, match="send the request without a version"):
        variants.primary("1")

    def unknown(model: str, version: str) -> bool:
        raise ModelNotFoundError(f"unknown model '{model}'")

    assert not split.ready("", unknown)


async def test_a_request_may_set_its_own_latency_target() -> None:
    clock = Clock()
    models = Models()
    route = make(
        models,
        {"variants": [{"model": "f32"}, {"model": "i8"}], "degrade": {"min_samples": 3}},
        clock,
    )
    policy = route._policy
    assert policy is not None
    for _ in range(3):
        policy.record(0, 0.010)  # the primary's p99 is 10 ms
    clock.now = 1.0
    assert (await route.infer(request())).model_name == "f32"  # no target configured
    assert (await route.infer(request(latency_target_ms=5))).model_name == "i8"
    assert (await route.infer(request(latency_target_ms=50.0))).model_name == "f32"
    with pytest.raises(InvalidInputError, match="'latency_target_ms' must be a positive number"):
        await route.infer(request(latency_target_ms="fast"))
