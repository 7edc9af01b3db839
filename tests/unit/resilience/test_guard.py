"""ModelGuard: which errors trip the breaker, request timeouts, settings from the config."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inferplex.config import ModelConfig
from inferplex.core.streaming import StreamedResponse
from inferplex.errors import (
    ConfigError,
    DeadlineExceededError,
    InvalidInputError,
    ModelExecutionError,
    ServerBusyError,
)
from inferplex.resilience.breaker import BreakerState
from inferplex.resilience.guard import GuardDefaults, ModelGuards
from inferplex.types import InferenceRequest, InferenceResponse


class FakeServed:
    """Stands in for a ModelVersion: answers, raises, or never answers, as told."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.outcome: BaseException | None = None
        self.hang = False
        self.seen: list[dict[str, Any]] = []

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(dict(request.parameters))
        if self.hang:
            await asyncio.get_running_loop().create_future()
        if self.outcome is not None:
            raise self.outcome
        return InferenceResponse(self.config.name, "1", [])


def config(**parameters: str) -> ModelConfig:
    return ModelConfig(name="m", parameters=parameters)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_guard_without_breaker_or_timeout() -> None:
    guards = ModelGuards(GuardDefaults())
    assert guards.get(config()) is None
    assert guards.statistics("m") is None and not guards.is_open("m")


async def test_only_execution_errors_count() -> None:
    clock = Clock()
    guards = ModelGuards(GuardDefaults(breaker_failures=2, breaker_cooldown_s=5), clock)
    served = FakeServed(config())
    guard = guards.get(served.config)
    assert guard is not None and guard.breaker is not None
    request = InferenceRequest("m", [])
    served.outcome = InvalidInputError("bad input")
    for _ in range(3):
        with pytest.raises(InvalidInputError):
            await guard.infer(served, request)  # type: ignore[arg-type]
    assert guard.breaker.state is BreakerState.CLOSED
    served.outcome = ModelExecutionError("kaput")
    for _ in range(2):
        with pytest.raises(ModelExecutionError):
            await guard.infer(served, request)  # type: ignore[arg-type]
    assert guards.is_open("m")
    with pytest.raises(ServerBusyError, match="model 'm' is failing"):
        await guard.infer(served, request)  # type: ignore[arg-type]
    assert len(served.seen) == 5  # the refused request never reached the model
    clock.now += 5
    served.outcome = None
    await guard.infer(served, request)  # type: ignore[arg-type]  # the probe
    assert guard.breaker.state is BreakerState.CLOSED
    assert guards.statistics("m")["times_opened"] == 1  # type: ignore[index]


async def test_unexpected_exceptions_count_and_cancellation_frees_the_probe() -> None:
    clock = Clock()
    guards = ModelGuards(GuardDefaults(breaker_failures=1, breaker_cooldown_s=0), clock)
    served = FakeServed(config())
    guard = guards.get(served.config)
    assert guard is not None and guard.breaker is not None
    served.outcome = RuntimeError("segfault-ish")
    with pytest.raises(RuntimeError):
        await guard.infer(served, InferenceRequest("m", []))  # type: ignore[arg-type]
    assert guard.breaker.state is BreakerState.OPEN
    served.outcome, served.hang = None, True
    probe = asyncio.create_task(guard.infer(served, InferenceRequest("m", [])))  # type: ignore[arg-type]
    while not served.seen[1:]:
        await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    served.hang = False
    await guard.infer(served, InferenceRequest("m", []))  # type: ignore[arg-type]
    assert guard.breaker.state is BreakerState.CLOSED


async def test_request_timeout_answers_deadline_exceeded_and_sets_the_queue_timeout() -> None:
    guards = ModelGuards(GuardDefaults())
    served = FakeServed(config(request_timeout_ms="20"))
    guard = guards.get(served.config)
    assert guard is not None and guard.breaker is None
    served.hang = True
    with pytest.raises(DeadlineExceededError, match="no answer within 20 ms"):
        await guard.infer(served, InferenceRequest("m", []))  # type: ignore[arg-type]
    assert served.seen[-1] == {"timeout": 20_000}  # the queue drops it at the same deadline
    # the request's own timeout (us) may shorten it, and is left as it is
    with pytest.raises(DeadlineExceededError, match="within 5 ms"):
        await guard.infer(served, InferenceRequest("m", [], parameters={"timeout": 5000}))  # type: ignore[arg-type]
    assert served.seen[-1] == {"timeout": 5000}
    with pytest.raises(DeadlineExceededError, match="within 20 ms"):
        await guard.infer(served, InferenceRequest("m", [], parameters={"timeout": 10**9}))  # type: ignore[arg-type]
    served.hang = False
    request = InferenceRequest("m", [], parameters={"x": 1})
    response = await guard.infer(served, request)  # type: ignore[arg-type]
    assert response.model_name == "m"
    assert served.seen[-1] == {"x": 1, "timeout": 20_000}
    assert request.parameters == {"x": 1}  # the caller's request is left as it was


async def test_timeouts_do_not_trip_the_breaker() -> None:
    guards = ModelGuards(GuardDefaults(breaker_failures=1, request_timeout_ms=5))
    served = FakeServed(config())
    served.hang = True
    guard = guards.get(served.config)
    assert guard is not None
    for _ in range(2):
        with pytest.raises(DeadlineExceededError):
            await guard.infer(served, InferenceRequest("m", []))  # type: ignore[arg-type]
    assert not guards.is_open("m")


def test_model_parameters_override_the_defaults_and_a_reload_keeps_the_state() -> None:
    clock = Clock()
    guards = ModelGuards(GuardDefaults(breaker_failures=5, breaker_cooldown_s=1), clock)
    first = config(breaker_failures="1", breaker_cooldown_s="30")
    guard = guards.get(first)
    assert guard is not None and guard.breaker is not None
    assert guards.get(first) is guard  # cached for the same config object
    guard.breaker.failure(False, clock(), "x")
    assert guards.is_open("m")
    reloaded = guards.get(config(breaker_failures="1", breaker_cooldown_s="30"))
    assert reloaded is not None and reloaded.breaker is guard.breaker
    changed = guards.get(config(breaker_failures="2"))
    assert changed is not None and changed.breaker is not guard.breaker
    assert not guards.is_open("m")
    assert guards.get(config(breaker_failures="0")) is None  # turned off for this model


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("breaker_failures", "many", "an integer >= 0, got 'many'"),
        ("breaker_failures", "1.5", "an integer >= 0"),
        ("breaker_cooldown_s", "-1", "a number >= 0, got '-1'"),
        ("request_timeout_ms", "soon", "a number >= 0"),
    ],
)
def test_bad_parameters_name_the_model_and_the_parameter(
    key: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match=rf"model 'm': parameter {key} must be {expected}"):
        ModelGuards(GuardDefaults()).get(config(**{key: value}))


class FakeStream:
    """A decoupled model's responses: the given items, then nothing; records its close."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.closed = False

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Any:
        if not self.items:
            raise StopAsyncIteration
        return self.items.pop(0)

    def close(self) -> None:
        self.closed = True


class FakeDecoupled(FakeServed):
    def __init__(self, config: ModelConfig, items: list[Any]) -> None:
        super().__init__(config)
        self.items = items

    def stream(self, request: InferenceRequest, bound: int) -> FakeStream:
        return FakeStream(list(self.items))


async def test_a_decoupled_streams_failures_open_its_breaker() -> None:
    """An execution error among a stream's responses counts as a failure; a final response
    without one as a success; a stream left before the end as neither; an open breaker
    refuses the next stream before the model sees it."""
    clock = Clock()
    guard = ModelGuards(GuardDefaults(), clock).get(config(breaker_failures="2"))
    assert guard is not None and guard.breaker is not None
    request = InferenceRequest("m", [])
    failed = StreamedResponse(None, ModelExecutionError("boom"), True)
    refused = StreamedResponse(None, InvalidInputError("bad"), True)
    answered = [
        StreamedResponse(InferenceResponse("m", "1", []), None, False),
        StreamedResponse(None),
    ]

    async def run(items: list[Any], leave_early: bool = False) -> None:
        responses = guard.stream(FakeDecoupled(config(), items), request, 4)  # type: ignore[arg-type]
        async for _ in responses:
            if leave_early:
                break
        responses.close()

    await run([failed])
    await run([refused])  # the client's doing: says nothing of the model
    await run(answered, leave_early=True)  # no verdict
    assert guard.breaker.consecutive_failures == 1
    await run(answered)
    assert guard.breaker.consecutive_failures == 0
    await run([failed])
    await run([failed])
    assert guard.breaker.state is BreakerState.OPEN
    with pytest.raises(ServerBusyError, match="circuit breaker open"):
        guard.stream(FakeDecoupled(config(), answered), request, 4)  # type: ignore[arg-type]
