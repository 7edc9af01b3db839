"""ShadowMirror: sends a copy of a route's requests to a shadow model, records its latency and
how far its outputs are from the primary's, and discards its answers.

The shadow request starts once the primary has answered, so it never competes with the
request whose answer the client waits for (it does compete with later requests: shadow
traffic takes capacity). It is bounded (``max_in_flight``; more are skipped, not queued) and
its failures are counted, never raised. Outputs are compared when both answers are in, for each
output both returned with the same shape: the largest absolute difference and the cosine
similarity of the flattened values (the lowest over the outputs counts for the request).
Large outputs are compared on a worker thread: the event loop does not compute.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable

import numpy as np

from inferplex.routing.config import ShadowConfig
from inferplex.routing.stats import ShadowStats
from inferplex.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

Serve = Callable[[InferenceRequest], Awaitable[InferenceResponse]]

#: outputs with more elements than this are compared off the event loop
_INLINE_ELEMENTS = 16384


class ShadowMirror:
    def __init__(self, route: str, config: ShadowConfig, serve: Serve, rng: random.Random) -> None:
        self.route = route
        self.config = config
        self.stats = ShadowStats()
        self._serve = serve
        self._rng = rng
        self._tasks: set[asyncio.Task[None]] = set()

    def mirror(
        self, request: InferenceRequest, primary: InferenceResponse, primary_latency: float
    ) -> None:
        """Send the shadow copy of ``request``, which the primary answered with ``primary``
        in ``primary_latency`` seconds, unless it is skipped."""
        config = self.config
        stats = self.stats
        if len(self._tasks) >= config.max_in_flight or (
            config.fraction < 1 and self._rng.random() >= config.fraction
        ):
            stats.skipped += 1
            return
        stats.mirrored += 1
        copy = InferenceRequest(
            config.model,
            request.inputs,
            config.version,
            request.id,
            request.outputs,
            dict(request.parameters),
        )
        task = asyncio.create_task(
            self._run(copy, primary, primary_latency), name=f"shadow:{self.route}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(
        self, request: InferenceRequest, primary: InferenceResponse, primary_latency: float
    ) -> None:
        stats = self.stats
        start = time.perf_counter()
        try:
            response = await self._serve(request)
        except Exception as exc:
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            stats.record_error(message)
            logger.debug("route '%s': shadow request failed: %s", self.route, message)
            return
        stats.record_latency(time.perf_counter() - start, primary_latency)
        pairs = _pairs(primary, response)
        if pairs is None:
            stats.record_diff(None, None)
            return
        if sum(a.size for a, _ in pairs) > _INLINE_ELEMENTS:
            max_abs, cosine = await asyncio.to_thread(compare, pairs)
        else:
            max_abs, cosine = compare(pairs)
        stats.record_diff(max_abs, cosine)

    async def close(self) -> None:
        """Cancel the shadow requests still running."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _pairs(
    primary: InferenceResponse, shadow: InferenceResponse
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """(primary, shadow) arrays of every output of the primary; None when the shadow lacks
    one or returns it with another shape or kind (numbers vs strings)."""
    theirs = {t.name: t.data for t in shadow.outputs}
    pairs = []
    for tensor in primary.outputs:
        other = theirs.get(tensor.name)
        if other is None or other.shape != tensor.data.shape:
            return None
        if (tensor.data.dtype.kind in "OSU") != (other.dtype.kind in "OSU"):
            return None
        pairs.append((tensor.data, other))
    return pairs or None


def compare(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """(largest absolute difference, lowest cosine similarity) over the output pairs. Strings
    compare as equal or not: difference 0 or 1, similarity the share of equal elements."""
    max_abs = 0.0
    cosine = 1.0
    for a, b in pairs:
        if a.dtype.kind in "OSU":
            equal = float(np.mean(a == b)) if a.size else 1.0
            max_abs = max(max_abs, 0.0 if equal == 1.0 else 1.0)
            cosine = min(cosine, equal)
            continue
        x = a.astype(np.float64, copy=False).ravel()
        y = b.astype(np.float64, copy=False).ravel()
        if not x.size:
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            max_abs = max(max_abs, float(np.max(np.abs(x - y))))
            norms = float(np.linalg.norm(x)) * float(np.linalg.norm(y))
            if norms > 0:
                similarity = float(np.dot(x, y)) / norms
            else:  # a zero vector: alike only if both are
                similarity = 1.0 if not np.any(x) and not np.any(y) else 0.0
        cosine = min(cosine, similarity)
    return max_abs, cosine
