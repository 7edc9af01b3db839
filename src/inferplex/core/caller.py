"""EngineCaller: the blocking ``ModelCaller`` backends use to run other served models."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from typing import Any

from inferplex.config.model_config import ModelConfig
from inferplex.core.call_stream import EngineStream, Open
from inferplex.core.dispatcher import STEP_PRECEDENCE, Dispatcher
from inferplex.core.step_gate import SchedulerGate
from inferplex.errors import UnsupportedError
from inferplex.types import InferenceRequest, InferenceResponse

Infer = Callable[[InferenceRequest], Coroutine[Any, Any, InferenceResponse]]


class EngineCaller:
    """Submits requests to the engine's event loop from a worker thread and waits."""

    def __init__(
        self,
        infer: Infer,
        loop: asyncio.AbstractEventLoop,
        stream: Open | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        """``stream``: the engine's streamed request (without it, ``stream`` is refused);
        ``dispatcher``: whose scheduler ``step_gate`` grants slots from."""
        self._infer = infer
        self._loop = loop
        self._stream = stream
        self._dispatcher = dispatcher

    def submit(
        self, request: InferenceRequest, precedence: int = 0
    ) -> concurrent.futures.Future[InferenceResponse]:
        """Start the request without waiting: pipelines run independent steps at once.
        ``precedence`` (a pipeline step's chain of steps still ahead) is passed to the
        dispatcher; see :data:`~inferplex.core.dispatcher.STEP_PRECEDENCE`."""
        coroutine = self._step(request, precedence) if precedence else self._infer(request)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    async def _step(self, request: InferenceRequest, precedence: int) -> InferenceResponse:
        # the task runs in its own copy of the context: the value reaches only this request
        STEP_PRECEDENCE.set(precedence)
        return await self._infer(request)

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        future = self.submit(request)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def stream(self, request: InferenceRequest) -> EngineStream:
        if self._stream is None:
            raise UnsupportedError("this server does not stream calls between models")
        return EngineStream(self._stream, request, self._loop)

    def step_gate(self, config: ModelConfig, label: str) -> SchedulerGate | None:
        """Compute slots of the server's scheduler for a backend's own thread
        (``backends.step_gate``); None without a dispatcher."""
        if self._dispatcher is None:
            return None
        return SchedulerGate(self._dispatcher, self._loop, config, label)
