"""ModelVersion: one loaded version of a model — its instances, validator and statistics."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from inferplex.backends.base import Backend
from inferplex.config.model_config import ModelConfig
from inferplex.core.datatypes import to_bytes_elements
from inferplex.core.instance import InstancePool, Job
from inferplex.core.stats import ExecutionTimes, ModelStats
from inferplex.core.types import InferenceRequest, InferenceResponse, Tensor
from inferplex.core.validation import RequestValidator
from inferplex.errors import InferplexError, ModelExecutionError, ModelNotReadyError

_now = time.perf_counter_ns


@dataclass(slots=True)
class _Work:
    feeds: dict[str, np.ndarray]
    outputs: list[str]


class ModelVersion:
    """Serves one version of one model. ``infer`` is called on the event loop."""

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        backends: list[Backend],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.config = config
        self.version = version
        self.version_str = str(version)
        self.stats = ModelStats(config.name, self.version_str)
        self._validator = RequestValidator(config)
        self._pool = InstancePool(f"{config.name}/{version}", backends, self._execute, loop)
        self._loop = loop
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if self._closing:
            raise ModelNotReadyError(
                f"model '{self.config.name}' version {self.version} is unloading"
            )
        start = _now()
        self._in_flight += 1
        self._idle.clear()
        ok = False
        try:
            feeds, batch_size = self._validator.feeds(request)
            outputs = self._validator.output_names(request)
            future: asyncio.Future[tuple[dict[str, np.ndarray], ExecutionTimes]]
            future = self._loop.create_future()
            self._pool.submit(Job(_Work(feeds, outputs), future, _now()))
            results, times = await future
            self.stats.record_execution(batch_size, times)
            response = InferenceResponse(
                model_name=self.config.name,
                model_version=self.version_str,
                outputs=[self._output_tensor(name, results[name]) for name in outputs],
                id=request.id,
            )
            ok = True
            return response
        finally:
            self.stats.record_request(ok, _now() - start)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    def _execute(self, backend: Backend, job: Job) -> tuple[dict[str, np.ndarray], ExecutionTimes]:
        """Runs in the instance's worker thread."""
        work: _Work = job.payload
        started = _now()
        try:
            results = backend.execute(work.feeds, work.outputs)
        except InferplexError:
            raise
        except Exception as exc:
            raise ModelExecutionError(
                f"model '{self.config.name}' version {self.version} failed: {exc}"
            ) from exc
        executed = _now()
        for name, spec in ((n, self._validator.output_spec(n)) for n in work.outputs):
            if spec.data_type == "BYTES":
                results[name] = to_bytes_elements(results[name])
        done = _now()
        return results, ExecutionTimes(
            queue_ns=started - job.enqueued_ns,
            compute_input_ns=0,
            compute_infer_ns=executed - started,
            compute_output_ns=done - executed,
        )

    def _output_tensor(self, name: str, data: np.ndarray) -> Tensor:
        spec = self._validator.output_spec(name)
        if spec.reshape is not None:
            shape = (data.shape[0], *spec.dims) if self.config.batched else spec.dims
            data = data.reshape(shape)
        return Tensor(name, spec.data_type, data.shape, data)

    async def drain(self, timeout: float | None = None) -> None:
        """Refuse new requests and wait until the in-flight ones are answered."""
        self._closing = True
        await asyncio.wait_for(self._idle.wait(), timeout)

    def close(self) -> None:
        """Stop the workers and free the instances (blocking: run it off the loop)."""
        self._pool.close()
