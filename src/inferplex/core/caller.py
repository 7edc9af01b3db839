"""EngineCaller: the blocking ``ModelCaller`` backends use to run other served models."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from inferplex.core.types import InferenceRequest, InferenceResponse

Infer = Callable[[InferenceRequest], Coroutine[Any, Any, InferenceResponse]]


class EngineCaller:
    """Submits requests to the engine's event loop from a worker thread and waits."""

    def __init__(self, infer: Infer, loop: asyncio.AbstractEventLoop) -> None:
        self._infer = infer
        self._loop = loop

    def submit(self, request: InferenceRequest) -> concurrent.futures.Future[InferenceResponse]:
        """Start the request without waiting: pipelines run independent steps at once."""
        return asyncio.run_coroutine_threadsafe(self._infer(request), self._loop)

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        future = self.submit(request)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise
