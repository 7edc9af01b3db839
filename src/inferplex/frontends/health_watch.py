"""``grpc.health.v1.Health/Watch`` streams, bounded and fed from one signal.

A Watch stream is long-lived and needs no token, so what a client can make the server hold
with them is bounded: streams open at once server-wide (``--health-watch-max-streams``) and
per connection (``--health-watch-max-per-connection``); one more is answered
RESOURCE_EXHAUSTED naming the limit, before its request is read. And a stream costs nothing
while nothing changes: no timer per stream. The hub listens to the registry's
``StatusSignal`` (core/status.py); when it fires, the status of each service watched is
read once (one read per distinct service, not per stream), and only the streams whose
status changed are woken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from inferplex.core.status import StatusSignal
from inferplex.errors import StreamLimitError

__all__ = ["Watch", "WatchHub"]


class Watch:
    """One Watch stream's place in the hub: the status to send next, when it changes."""

    __slots__ = ("_wake", "connection", "sent", "service", "status")

    def __init__(self, connection: Hashable) -> None:
        self.connection = connection
        self.service: str | None = None  # set once the request names it
        self.status: int | None = None  # the status as last read
        self.sent: int | None = None  # the status last sent
        self._wake: asyncio.Future[None] | None = None

    async def next(self) -> int:
        """The status to send: the current one, once it differs from the last sent."""
        while self.status == self.sent:
            self._wake = asyncio.get_running_loop().create_future()
            try:
                await self._wake
            finally:
                self._wake = None
        self.sent = self.status
        assert self.sent is not None
        return self.sent

    def update(self, status: int) -> None:
        self.status = status
        if self._wake is not None and not self._wake.done() and status != self.sent:
            self._wake.set_result(None)


class WatchHub:
    """The Watch streams of one server; ``status(service)`` reads a service's status."""

    def __init__(
        self,
        status: Callable[[str], int],
        signal: StatusSignal,
        max_streams: int,
        max_per_connection: int,
    ) -> None:
        self._status = status
        self._max_streams = max_streams
        self._max_per_connection = max_per_connection
        self._by_service: dict[str, set[Watch]] = {}
        self._by_connection: dict[Hashable, int] = {}
        self._open = 0
        self._refresh_queued = False
        self._loop: asyncio.AbstractEventLoop | None = None
        signal.listen(self._changed)

    def open(self, connection: Hashable) -> Watch:
        """A place for a new stream on ``connection``; StreamLimitError over a bound."""
        if self._open >= self._max_streams:
            raise StreamLimitError(
                f"{self._open} health Watch streams are open, the server's limit "
                "(INFERPLEX_HEALTH_WATCH_MAX_STREAMS): retry later or use Check"
            )
        on_connection = self._by_connection.get(connection, 0)
        if on_connection >= self._max_per_connection:
            raise StreamLimitError(
                f"this connection has {on_connection} health Watch streams open, the limit "
                "(INFERPLEX_HEALTH_WATCH_MAX_PER_CONNECTION)"
            )
        self._open += 1
        self._by_connection[connection] = on_connection + 1
        return Watch(connection)

    def watch(self, place: Watch, service: str) -> None:
        """``place`` watches ``service`` from now on (its status read now)."""
        self._loop = asyncio.get_running_loop()
        place.service = service
        self._by_service.setdefault(service, set()).add(place)
        place.update(self._status(service))

    def close(self, place: Watch) -> None:
        self._open -= 1
        left = self._by_connection[place.connection] - 1
        if left:
            self._by_connection[place.connection] = left
        else:
            del self._by_connection[place.connection]
        if place.service is not None:
            watchers = self._by_service.get(place.service)
            if watchers is not None:
                watchers.discard(place)
                if not watchers:
                    del self._by_service[place.service]

    def _changed(self) -> None:
        # one refresh for every change made in this turn of the loop (a load publishes and
        # sets its state together)
        if self._by_service and not self._refresh_queued and self._loop is not None:
            self._refresh_queued = True
            self._loop.call_soon_threadsafe(self._refresh)

    def _refresh(self) -> None:
        self._refresh_queued = False
        for service, watchers in list(self._by_service.items()):
            status = self._status(service)
            for place in watchers:
                place.update(status)
