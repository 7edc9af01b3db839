"""Compute slots for a backend that computes on its own thread (the LLM engine's steps), from
the server's cross-model scheduler: the server's ``ModelCaller`` makes them
(``core.step_gate``), so such a backend's work is weighed (priority, round robin, the
adaptive SLO policy) like the batches of every other model, one unit per step."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from inferplex.config.model_config import ModelConfig


class StepGate(Protocol):
    """Grants one unit of work at a time a compute slot. Blocking: called from the backend's
    own thread, never from the event loop."""

    def acquire(self) -> object | None:
        """Wait for a slot; the grant to release, or None once the gate is closed."""
        ...

    def release(self, grant: object) -> None:
        """The unit of work that ``grant`` allowed is done: its slot is free again."""
        ...

    def close(self) -> None:
        """No more units: a waiting ``acquire`` returns None, the gate leaves the scheduler."""
        ...


@runtime_checkable
class StepGates(Protocol):
    """What makes gates (the server's ``ModelCaller`` does)."""

    def step_gate(self, config: ModelConfig, label: str) -> StepGate | None:
        """A gate whose units the scheduler weighs by ``config``'s scheduling settings;
        ``label`` names it in the scheduler (unique among the gates open at once); None
        where the server has no scheduler to grant slots."""
        ...
