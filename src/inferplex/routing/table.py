"""RouteTable: the routes of the repository's ``routing.yaml``, by name.

``reload`` re-reads the file when it changed (the engine calls it at start and before each
repository scan). A file with errors leaves the routes as they were and says why in
``error`` (shown by ``GET /v2/routes``) and the log. Routes whose config did not change keep
their statistics across reloads. A route may not take the name of a model: that route is
left out (the model keeps its name) and the error says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from inferplex.errors import ConfigError, ModelNotFoundError
from inferplex.routing.config import ROUTING_FILE, RoutingFile, read_routing
from inferplex.routing.route import BreakerOpen, Queued, Route, Serve
from inferplex.routing.signatures import ConfigOf

logger = logging.getLogger(__name__)


class _Signature(NamedTuple):
    """What says the routing file changed."""

    mtime_ns: int
    size: int


class RouteTable:
    def __init__(
        self,
        serve: Serve,
        queued: Queued,
        breaker_open: BreakerOpen,
        config_of: ConfigOf = lambda model: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``config_of`` gives a model's config (None while it is not read): the inputs and
        outputs of a route's targets must agree (:mod:`.signatures`)."""
        self._serve = serve
        self._queued = queued
        self._breaker_open = breaker_open
        self._config_of = config_of
        self._clock = clock
        self._routes: dict[str, Route] = {}
        self._signature: _Signature | None = None  # None: no file
        self._read = False
        self.error = ""

    # -- lookups (hot path: one dict lookup) -------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self._routes)

    def __contains__(self, name: object) -> bool:
        return name in self._routes

    def get(self, name: str) -> Route | None:
        return self._routes.get(name)

    def route(self, name: str) -> Route:
        try:
            return self._routes[name]
        except KeyError:
            known = ", ".join(sorted(self._routes)) or "none"
            raise ModelNotFoundError(f"unknown route '{name}' (routes: {known})") from None

    # -- loading -----------------------------------------------------------------------------
    async def reload(self, repository: Path, model_names: Iterable[str]) -> bool:
        """Apply ``repository/routing.yaml`` if it changed since the last call; returns whether
        the routes changed."""
        path = repository / ROUTING_FILE
        signature = await asyncio.to_thread(_signature, path)
        if self._read and signature == self._signature:
            return False
        self._read = True
        self._signature = signature
        try:
            routing = await asyncio.to_thread(read_routing, repository)
        except ConfigError as exc:
            self.error = exc.message
            logger.error("routing file not applied, the routes stay as they were:\n%s", exc)
            return False
        await self.install(routing or RoutingFile(), set(model_names))
        return True

    async def install(self, routing: RoutingFile, model_names: set[str]) -> None:
        """Replace the routes with ``routing``'s (unchanged ones keep their statistics)."""
        errors = []
        routes: dict[str, Route] = {}
        for name, config in routing.routes.items():
            if name in model_names:
                errors.append(
                    f"route '{name}' has the name of a model; the model keeps it (rename the route)"
                )
                continue
            old = self._routes.get(name)
            if old is not None and old.config == config:
                routes[name] = old
            else:
                routes[name] = Route(
                    name,
                    config,
                    self._serve,
                    self._queued,
                    self._breaker_open,
                    self._clock,
                    self._config_of,
                )
        replaced = [r for n, r in self._routes.items() if routes.get(n) is not r]
        self._routes = routes
        for error in errors:
            logger.error("%s", error)
        # a route whose targets disagree stays, refusing requests (logged by the route): it
        # serves once they agree, without a change of the file
        errors += [refused for r in routes.values() if (refused := r.refusal())]
        self.error = "\n".join(errors)
        if routes:
            logger.info("routes: %s", ", ".join(sorted(routes)))
        await asyncio.gather(*(r.close() for r in replaced))

    async def close(self) -> None:
        """Stop the shadow requests still running."""
        await asyncio.gather(*(r.close() for r in self._routes.values()))

    # -- reporting ---------------------------------------------------------------------------
    def listing(self) -> dict[str, Any]:
        """``GET /v2/routes``: every route and the routing file's error, if any."""
        return {
            "routes": [self._routes[n].describe() for n in sorted(self._routes)],
            "error": self.error,
        }

    def statistics(self, name: str) -> dict[str, Any]:
        """``GET /v2/routes/{name}/stats``."""
        return self.route(name).statistics()


def _signature(path: Path) -> _Signature | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return _Signature(stat.st_mtime_ns, stat.st_size)
