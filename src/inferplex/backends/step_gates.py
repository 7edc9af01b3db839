"""Triton's ``ensemble_scheduling { max_inflight_requests }``: at most N requests in flight
at each step of an ensemble, across all of its requests.

A step whose inputs are ready asks its step's gate for a slot; without a free one it waits,
in order, until a request of that step completes. The wait is a future, so the request
holding it goes on collecting the answers of its other steps meanwhile. One set of gates
serves every instance of an ensemble version: the bound is the ensemble's, as in Triton,
where an ensemble has one scheduler.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from concurrent.futures import Future


class StepGate:
    """Slots for the requests of one step, handed out first come, first served."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiting: deque[Future[None]] = deque()
        self._lock = threading.Lock()

    def acquire(self) -> Future[None]:
        """A future done once the caller holds a slot (at once when one is free)."""
        slot: Future[None] = Future()
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                slot.set_result(None)
            else:
                self._waiting.append(slot)
        return slot

    def release(self) -> None:
        """A request of the step completed: its slot goes to the first still waiting."""
        with self._lock:
            while self._waiting:
                slot = self._waiting.popleft()
                if slot.set_running_or_notify_cancel():  # False: its request gave up
                    slot.set_result(None)
                    return
            self._free += 1

    def abandon(self, slot: Future[None]) -> None:
        """The request waiting on ``slot`` ends (another step failed): its place in the
        line goes, or the slot, if it was handed over meanwhile."""
        if not slot.cancel():
            self.release()


class StepGates:
    """The gates of one ensemble version's steps (step number -> gate)."""

    def __init__(self, limit: int, steps: int) -> None:
        self.by_step = {number: StepGate(limit) for number in range(1, steps + 1)}


#: (version folder, limit, step count) -> the gates its instances share; an entry goes with
#: the last instance that holds it
_SHARED: weakref.WeakValueDictionary[tuple[str, int, int], StepGates] = (
    weakref.WeakValueDictionary()
)
_SHARED_LOCK = threading.Lock()


def shared_gates(version: str, limit: int, steps: int) -> StepGates | None:
    """The gates of the ensemble version in folder ``version``; None when ``limit`` is 0 (no
    limit: no gate is asked at all)."""
    if limit <= 0:
        return None
    key = (version, limit, steps)
    with _SHARED_LOCK:
        gates = _SHARED.get(key)
        if gates is None:
            gates = _SHARED[key] = StepGates(limit, steps)
        return gates
