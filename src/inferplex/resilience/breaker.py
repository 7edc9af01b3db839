"""CircuitBreaker: a model that keeps failing fast-fails for a while instead of taking every
request down with it.

Pure state machine (no I/O, no asyncio); the caller owns the clock and passes ``now``:

- CLOSED: requests pass. ``failure_threshold`` consecutive failures -> OPEN (a success in
  between resets the count).
- OPEN: ``admit`` raises ServerBusyError (503 / UNAVAILABLE) naming the model, the failures
  and when it retries. Once ``cooldown_s`` has passed since it opened -> HALF_OPEN.
- HALF_OPEN: the first request is admitted as the one probe; others fast-fail until it ends.
  Probe succeeds -> CLOSED; probe fails -> OPEN again (a new cooldown); a probe that ends
  without a verdict (a client error, a cancelled call) frees the probe slot for the next one.

Only execution failures count (what the model did wrong); bad input, unknown versions,
queue timeouts and full queues are the client's or the load's business, not the model's.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Any

from inferplex.errors import ServerBusyError


class BreakerState(enum.Enum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """When a breaker opens and for how long."""

    failure_threshold: int
    """consecutive failures that open the breaker (>= 1)"""
    cooldown_s: float
    """seconds an open breaker refuses requests before it lets one probe through"""


class CircuitBreaker:
    """The breaker of one model. Call ``admit(now)`` before a request and exactly one of
    ``success``, ``failure`` or ``release`` (no verdict) after it, with the returned token."""

    def __init__(self, model: str, settings: BreakerSettings) -> None:
        if settings.failure_threshold < 1:
            raise ValueError("failure_threshold must be >= 1")
        if settings.cooldown_s < 0:
            raise ValueError("cooldown_s must be >= 0")
        self.model = model
        self.settings = settings
        self.state = BreakerState.CLOSED
        self.consecutive_failures = 0
        self.opened_at = 0.0
        self.last_error = ""
        self.times_opened = 0
        self.rejected = 0
        self._probing = False

    # -- before a request ------------------------------------------------------------------
    def admit(self, now: float) -> bool:
        """Let a request through, or raise ServerBusyError. Returns True when the request is
        the half-open probe (pass it back to ``success`` / ``failure`` / ``release``)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return False
        if state is BreakerState.OPEN:
            if now - self.opened_at < self.settings.cooldown_s:
                self.rejected += 1
                raise self._open_error(now)
            self.state = BreakerState.HALF_OPEN
        if self._probing:
            self.rejected += 1
            raise ServerBusyError(
                f"model '{self.model}' is failing: circuit breaker half-open, a probe request "
                "is testing the model; retry in a moment"
            )
        self._probing = True
        return True

    # -- after a request -------------------------------------------------------------------
    def success(self, probe: bool) -> None:
        if probe:
            self._probing = False
            self.state = BreakerState.CLOSED
        self.consecutive_failures = 0

    def failure(self, probe: bool, now: float, error: str) -> None:
        self.last_error = error
        self.consecutive_failures += 1
        if probe:
            self._probing = False
            self._open(now)
            return
        if (
            self.state is BreakerState.CLOSED
            and self.consecutive_failures >= self.settings.failure_threshold
        ):
            self._open(now)

    def release(self, probe: bool) -> None:
        """The request ended without telling whether the model works (client error,
        cancelled): a probe slot it held goes to the next request."""
        if probe:
            self._probing = False

    # -- reporting -------------------------------------------------------------------------
    def retry_in(self, now: float) -> float:
        """Seconds until an open breaker lets a probe through (0 when not open)."""
        if self.state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self.opened_at + self.settings.cooldown_s - now)

    def to_dict(self, now: float) -> dict[str, Any]:
        """The breaker as the model statistics show it."""
        return {
            "state": self.state.value,
            "consecutive_failures": self.consecutive_failures,
            "failure_threshold": self.settings.failure_threshold,
            "cooldown_s": self.settings.cooldown_s,
            "retry_in_s": round(self.retry_in(now), 3),
            "times_opened": self.times_opened,
            "rejected": self.rejected,
            "last_error": self.last_error,
        }

    def _open(self, now: float) -> None:
        self.state = BreakerState.OPEN
        self.opened_at = now
        self.times_opened += 1

    def _open_error(self, now: float) -> ServerBusyError:
        wait = self.retry_in(now)
        at = time.strftime("%H:%M:%S", time.gmtime(time.time() + wait))
        last = f" (last: {self.last_error})" if self.last_error else ""
        return ServerBusyError(
            f"model '{self.model}' is failing: circuit breaker open after "
            f"{self.consecutive_failures} consecutive failure(s){last}; it retries in "
            f"{wait:.1f} s (at {at} UTC)"
        )
