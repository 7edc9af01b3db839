"""What the dynamic batcher queues and closes: a pending request as the policy sees it, a
closed batch, and why it closed."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any


class CloseReason(enum.StrEnum):
    """Why a batch closed; counted per model for the statistics."""

    FULL = "full"
    PREFERRED = "preferred"
    DELAY = "delay"
    DEADLINE = "deadline"
    IDLE = "idle"


@dataclass(slots=True, eq=False)
class PendingRequest:
    """One queued request as the policy sees it. Compared and hashed by identity."""

    rows: int
    """size of the batch dimension this request carries (>= 1)"""
    shape_key: Hashable
    """only requests with equal keys share a batch (their non-batch dims)"""
    arrival: float
    """``now`` at submit; the queue delay and the timeout count from here"""
    priority: int = 0
    """V2 request parameter ``priority``; 0 = the config's default level"""
    timeout_us: int = 0
    """V2 request parameter ``timeout`` in microseconds; 0 = none"""
    payload: Any = None
    """opaque to the policy: the driver's future, arrays, ..."""
    seq: int = -1
    """set by the policy: arrival order"""
    level: int = 0
    """set by the policy: the resolved priority level (0 when the model has no levels)"""
    deadline: float | None = None
    """set by the policy: absolute deadline, or None"""
    delayed: bool = False
    """set by the policy: timed out at a DELAY level and moved behind the others"""
    lane: int = 0
    """the instance lane it must run on, for a queue of lanes (``core.lanes``); else unused"""


@dataclass(slots=True)
class Batch:
    """Requests to run together; rows are concatenated in the order of ``requests``."""

    requests: list[PendingRequest]
    rows: int
    reason: CloseReason
    lane: int = -1
    """the instance it must run on, set by a queue of lanes (``core.lanes``); -1: any"""
