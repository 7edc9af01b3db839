"""ModelGuard: the circuit breaker and the request timeout around one model's ``infer``.

Settings come from the model's config parameters, else from the server's defaults::

    parameters { key: "breaker_failures"   value: { string_value: "5" } }    # 0 = no breaker
    parameters { key: "breaker_cooldown_s" value: { string_value: "10" } }
    parameters { key: "request_timeout_ms" value: { string_value: "250" } }  # 0 = none

A decoupled model's stream of responses is behind the same breaker (``ModelGuard.stream``).
``request_timeout_ms`` bounds the whole request (queue and execution): the client gets
DeadlineExceededError (504 / DEADLINE_EXCEEDED) when it passes. A request's own V2 ``timeout``
parameter (microseconds) may shorten it, never lengthen it. Where the request has none, the
guard sets ``timeout`` to the model's default so that the queue drops the request when it
expires instead of running it for nobody (a FIFO model always honours ``timeout``; a
dynamic-batching model does with ``allow_timeout_override``, as in Triton).

A model with neither a breaker nor a timeout has no guard: its requests go straight to the
model (``ModelGuards.get`` returns None), so the hot path pays one dict lookup.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferplex.config.model_config import ModelConfig
from inferplex.core.streaming import Responses, ResponseStream, StreamedResponse
from inferplex.errors import ConfigError, DeadlineExceededError, ErrorCode, InferplexError
from inferplex.resilience.breaker import BreakerSettings, CircuitBreaker
from inferplex.resilience.deadlines import Deadlines
from inferplex.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferplex.core.model import ModelVersion

#: model config parameters read here
BREAKER_FAILURES = "breaker_failures"
BREAKER_COOLDOWN = "breaker_cooldown_s"
REQUEST_TIMEOUT = "request_timeout_ms"

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class GuardDefaults:
    """The server-wide defaults a model's parameters override."""

    breaker_failures: int = 0
    breaker_cooldown_s: float = 10.0
    request_timeout_ms: float = 0.0


class ModelGuard:
    """Breaker and timeout of one model, for one config of it."""

    def __init__(
        self,
        config: ModelConfig,
        breaker: CircuitBreaker | None,
        timeout_ms: float,
        clock: Clock,
    ) -> None:
        self.config = config
        self.breaker = breaker
        self.timeout_ms = timeout_ms
        self._clock = clock
        self._deadlines: Deadlines | None = None  # on the loop of the first timed request

    async def infer(self, served: ModelVersion, request: InferenceRequest) -> InferenceResponse:
        breaker = self.breaker
        if breaker is None:
            return await self._timed(served, request)
        clock = self._clock
        probe = breaker.admit(clock())
        try:
            response = await self._timed(served, request)
        except InferplexError as exc:
            if exc.code is ErrorCode.INTERNAL:
                breaker.failure(probe, clock(), exc.message)
            else:  # the client's or the load's doing: says nothing about the model
                breaker.release(probe)
            raise
        except Exception as exc:
            breaker.failure(probe, clock(), f"{type(exc).__name__}: {exc}")
            raise
        except BaseException:  # cancelled: the caller went away
            breaker.release(probe)
            raise
        breaker.success(probe)
        return response

    def stream(self, served: ModelVersion, request: InferenceRequest, bound: int) -> Responses:
        """A decoupled model's responses behind its breaker: refused at once while it is
        open; an execution failure among the responses counts against it, a final response
        without one for it, a stream its reader leaves early for neither. (The model's
        request timeout bounds one answer: a stream's responses come for as long as the model
        sends them, within the call's own deadline.)"""
        breaker = self.breaker
        if breaker is None:
            return served.stream(request, bound)
        probe = breaker.admit(self._clock())
        try:
            responses = served.stream(request, bound)
        except BaseException:  # refused before it ran: says nothing about the model
            breaker.release(probe)
            raise
        return _GuardedStream(responses, breaker, probe, self._clock)

    async def _timed(self, served: ModelVersion, request: InferenceRequest) -> InferenceResponse:
        if not self.timeout_ms:
            return await served.infer(request)
        timeout_us = round(self.timeout_ms * 1e3)
        parameters = request.parameters
        own = parameters.get("timeout") if parameters else None
        if isinstance(own, int) and not isinstance(own, bool) and own > 0:
            timeout_us = min(timeout_us, own)
        elif own is None:
            # the queue expires it too, rather than running it after the client was answered
            # (a copy: the caller may send its request object again, elsewhere)
            request = InferenceRequest(
                request.model_name,
                request.inputs,
                request.model_version,
                request.id,
                request.outputs,
                {**parameters, "timeout": timeout_us},
            )
        deadlines = self._deadlines
        if deadlines is None:
            deadlines = self._deadlines = Deadlines(asyncio.get_running_loop())
        deadline = deadlines.start(timeout_us * 1e-6)
        try:
            response = await served.infer(request)
        except asyncio.CancelledError:
            if not deadlines.expired(deadline):
                raise
            raise DeadlineExceededError(
                f"model '{self.config.name}': no answer within {timeout_us / 1e3:g} ms "
                f"(model parameter {REQUEST_TIMEOUT} {self.timeout_ms:g} ms, or the request's "
                "'timeout' parameter)"
            ) from None
        finally:
            deadlines.finish(deadline)
        return response


class _GuardedStream:
    """A decoupled model's responses, passing on to its breaker the verdict they carry."""

    def __init__(
        self, responses: ResponseStream, breaker: CircuitBreaker, probe: Any, clock: Clock
    ) -> None:
        self._responses = responses
        self._breaker = breaker
        self._probe = probe
        self._clock = clock
        self._judged = False

    def __aiter__(self) -> _GuardedStream:
        return self

    async def __anext__(self) -> StreamedResponse:
        item = await anext(self._responses)
        if self._judged:
            return item
        error = item.error
        if error is not None and error.code is ErrorCode.INTERNAL:
            self._judged = True
            self._breaker.failure(self._probe, self._clock(), error.message)
        elif error is not None:  # the client's or the load's doing: says nothing
            self._judged = True
            self._breaker.release(self._probe)
        elif item.final:
            self._judged = True
            self._breaker.success(self._probe)
        return item

    def close(self) -> None:
        if not self._judged:  # left before the end: no verdict
            self._judged = True
            self._breaker.release(self._probe)
        self._responses.close()


class ModelGuards:
    """The guard of every model, built on first use from the model's current config."""

    def __init__(self, defaults: GuardDefaults, clock: Clock = time.monotonic) -> None:
        self.defaults = defaults
        self._clock = clock
        # name -> (the config it was built for, its guard or None when it needs none)
        self._guards: dict[str, tuple[ModelConfig, ModelGuard | None]] = {}

    def get(self, config: ModelConfig) -> ModelGuard | None:
        cached = self._guards.get(config.name)
        if cached is not None and cached[0] is config:
            return cached[1]
        guard = self._build(config, cached[1] if cached else None)
        self._guards[config.name] = (config, guard)
        return guard

    def breaker(self, name: str) -> CircuitBreaker | None:
        cached = self._guards.get(name)
        return cached[1].breaker if cached and cached[1] else None

    def is_open(self, name: str) -> bool:
        """Whether the model's breaker fast-fails requests now (open, cooldown not over)."""
        breaker = self.breaker(name)
        return breaker is not None and breaker.retry_in(self._clock()) > 0

    def statistics(self, name: str) -> dict[str, Any] | None:
        """The model's breaker as its statistics show it, if it has one."""
        breaker = self.breaker(name)
        return None if breaker is None else breaker.to_dict(self._clock())

    def _build(self, config: ModelConfig, old: ModelGuard | None) -> ModelGuard | None:
        defaults = self.defaults
        failures = _parameter(config, BREAKER_FAILURES, int, defaults.breaker_failures)
        cooldown = _parameter(config, BREAKER_COOLDOWN, float, defaults.breaker_cooldown_s)
        timeout_ms = _parameter(config, REQUEST_TIMEOUT, float, defaults.request_timeout_ms)
        breaker = None
        if failures:
            settings = BreakerSettings(failures, cooldown)
            # a reloaded config keeps the breaker's state when its settings did not change
            if old is not None and old.breaker is not None and old.breaker.settings == settings:
                breaker = old.breaker
            else:
                breaker = CircuitBreaker(config.name, settings)
        if breaker is None and not timeout_ms:
            return None
        return ModelGuard(config, breaker, timeout_ms, self._clock)


def check_parameters(config: ModelConfig) -> None:
    """ConfigError when the model's breaker or timeout parameters are malformed, so that a
    bad value fails the model's load instead of its requests."""
    _parameter(config, BREAKER_FAILURES, int, 0)
    _parameter(config, BREAKER_COOLDOWN, float, 0.0)
    _parameter(config, REQUEST_TIMEOUT, float, 0.0)


def _parameter(config: ModelConfig, key: str, kind: type[int] | type[float], default: Any) -> Any:
    raw = config.parameters.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if value < 0:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(
            f"model '{config.name}': parameter {key} must be {what} >= 0, got '{raw}'"
        )
    return value
