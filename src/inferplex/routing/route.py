"""Route: one name that clients call like a model, answered by one of its targets (weighted
split, sticky per key) or variants (graceful degradation), optionally mirrored to a shadow."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from inferplex.errors import (
    InferplexError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
)
from inferplex.routing.config import DegradeConfig, RouteConfig, TargetConfig
from inferplex.routing.pick import WeightedPicker
from inferplex.routing.shadow import ShadowMirror
from inferplex.routing.signatures import ConfigOf, SignatureCheck
from inferplex.routing.stats import TargetStats
from inferplex.routing.variants import DegradePolicy, VariantLoad
from inferplex.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

Serve = Callable[[InferenceRequest], Awaitable[InferenceResponse]]
#: (model, version) -> requests queued for it; raises InferplexError when it cannot serve
Queued = Callable[[str, str], int]
#: model -> whether its circuit breaker refuses requests now
BreakerOpen = Callable[[str], bool]

#: request parameter: false keeps a variants route on its first variant
ALLOW_DEGRADED = "allow_degraded"
#: request parameter: a variants route's latency target (p99, ms) for this request
LATENCY_TARGET = "latency_target_ms"
#: response parameter naming the variant that answered
VARIANT = "variant"

_now = time.perf_counter
#: a variants route without a ``degrade`` section degrades only from variants that cannot serve
_NO_THRESHOLDS = DegradeConfig()


class Route:
    """Answers one route name from its targets or variants; records per-target statistics."""

    def __init__(
        self,
        name: str,
        config: RouteConfig,
        serve: Serve,
        queued: Queued,
        breaker_open: BreakerOpen,
        clock: Callable[[], float] = time.monotonic,
        config_of: ConfigOf = lambda model: None,
    ) -> None:
        """``config_of`` gives a model's config, to compare the targets' inputs and outputs
        (:mod:`.signatures`); by default none is known and nothing is compared."""
        self.name = name
        self.config = config
        self.members = config.members
        self._serve = serve
        self._queued = queued
        self._breaker_open = breaker_open
        self._clock = clock
        self.stats = [TargetStats() for _ in self.members]
        self.requests = 0
        self.degraded = 0
        self.last_degrade_reason = ""
        self._sticky = config.sticky.parameter if config.sticky else None
        rng = random.Random(config.seed)
        self._picker = (
            WeightedPicker([t.weight for t in config.targets], config.seed)
            if config.targets
            else None
        )
        self._policy = (
            None
            if config.targets
            else DegradePolicy(config.degrade or _NO_THRESHOLDS, len(self.members), clock)
        )
        self.shadow = (
            ShadowMirror(name, config.shadow, serve, rng) if config.shadow is not None else None
        )
        self._signatures = SignatureCheck(name, self.members, config_of)

    # -- serving ---------------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if request.model_version:
            raise ModelNotFoundError(self._no_versions())
        refused = self.refusal()
        if refused:
            raise ModelNotReadyError(refused)
        self.requests += 1
        index = self._choose(request.parameters)
        target = self.members[index]
        routed = InferenceRequest(
            target.model,
            request.inputs,
            target.version,
            request.id,
            request.outputs,
            request.parameters,
        )
        shadow = self.shadow
        start = _now()
        try:
            response = await self._serve(routed)
        except Exception:
            # no shadow copy either: a request the primary could not answer (often a bad
            # one) tells nothing about how the shadow compares
            self.stats[index].record(False, _now() - start)
            raise
        latency = _now() - start
        self.stats[index].record(True, latency)
        if shadow is not None:
            shadow.mirror(request, response, latency)
        if self._policy is not None:
            self._policy.record(index, latency)
            response.parameters = {**response.parameters, VARIANT: target.name}
        return response

    def _choose(self, parameters: dict[str, Any]) -> int:
        if self._picker is not None:
            key = parameters.get(self._sticky) if self._sticky and parameters else None
            return self._picker.pick(None if key is None else str(key))
        assert self._policy is not None
        target = None
        if parameters:
            if parameters.get(ALLOW_DEGRADED) is False:
                return 0
            target = _latency_target(parameters.get(LATENCY_TARGET))
        index, reason = self._policy.choose(self._load, target)
        if index:
            self.degraded += 1
            self.last_degrade_reason = reason
        return index

    def _load(self, index: int) -> VariantLoad:
        target = self.members[index]
        try:
            queued: int | None = self._queued(target.model, target.version)
        except InferplexError:
            queued = None
        return VariantLoad(queued, self._breaker_open(target.model))

    def refusal(self) -> str:
        """Why the route refuses requests: its targets' inputs or outputs differ (checked
        again whenever a target's config appears or changes; logged once per new finding);
        "" when they agree."""
        before = self._signatures.error
        error = self._signatures.check()
        if error and error != before:
            logger.error("%s; its requests are refused until the targets agree", error)
        return error

    # -- what the route looks like ---------------------------------------------------------
    def primary(self, version: str = "") -> TargetConfig:
        """The target whose metadata and config the route shows: the first one listed."""
        if version:
            raise ModelNotFoundError(self._no_versions())
        return self.members[0]

    def ready(self, version: str, model_ready: Callable[[str, str], bool]) -> bool:
        """Whether the route can answer: a split route when every target with a weight is
        ready, a variants route when one of its variants is."""
        self.primary(version)  # a route has no versions
        if self.refusal():
            return False

        def target_ready(target: TargetConfig) -> bool:
            try:
                return model_ready(target.model, target.version)
            except InferplexError:  # unknown model or version
                return False

        if self.config.targets:
            return all(target_ready(t) for t in self.members if t.weight > 0)
        return any(target_ready(t) for t in self.members)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.config.kind,
            "targets": [_target_dict(t, self.config.targets != ()) for t in self.members],
        }
        if self.config.sticky is not None:
            out["sticky_parameter"] = self.config.sticky.parameter
        if self.config.shadow is not None:
            shadow = self.config.shadow
            out["shadow"] = {
                "model": shadow.model,
                "version": shadow.version,
                "fraction": shadow.fraction,
            }
        if self.config.variants:
            out["degrade"] = (self.config.degrade or _NO_THRESHOLDS).model_dump()
        if self._signatures.error:
            out["error"] = self._signatures.error
        return out

    def statistics(self) -> dict[str, Any]:
        out = self.describe()
        out["requests"] = self.requests
        for target, stats in zip(out["targets"], self.stats, strict=True):
            target.update(stats.to_dict())
        if self._policy is not None:
            out["degraded"] = self.degraded
            out["last_degrade_reason"] = self.last_degrade_reason
            for target, window in zip(out["targets"], self._policy.windows, strict=True):
                target["window_p99_ms"] = window.p99_ms(self._clock())
        if self.shadow is not None:
            out["shadow"].update(self.shadow.stats.to_dict())
        return out

    async def close(self) -> None:
        if self.shadow is not None:
            await self.shadow.close()

    def _no_versions(self) -> str:
        targets = ", ".join(t.name for t in self.members)
        return (
            f"'{self.name}' is a route: it has no versions of its own (send the request "
            f"without a version, or to one of its targets directly: {targets})"
        )


def _latency_target(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidInputError(
            f"request parameter '{LATENCY_TARGET}' must be a positive number of "
            f"milliseconds, got {value!r}"
        )
    return float(value)


def _target_dict(target: TargetConfig, weighted: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": target.name, "model": target.model, "version": target.version}
    if weighted:
        out["weight"] = target.weight
    return out
