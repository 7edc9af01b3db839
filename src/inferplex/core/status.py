"""One signal for "what a health check answers may have changed": the registry fires it when
a model's served versions change or a model appears or leaves, the engine when the server's
readiness or its routes change. gRPC's Health/Watch streams are fed from it
(frontends/health_watch.py), so a thousand watchers cost nothing while nothing changes,
instead of a timer and a status read each per second.

Fired on the event loop thread, where the lifecycle runs; listeners run synchronously and
should only schedule their work.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["StatusSignal"]


class StatusSignal:
    """Listeners called whenever readiness may have changed (they decide whether it did)."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def fire(self) -> None:
        for listener in self._listeners:
            listener()
