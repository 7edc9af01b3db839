"""Backends whose every instance runs in its own worker process (``backends/python/worker.py``):
Python models (``backends/python``) and models isolated with the parameter ``isolation``
(``backends/isolated.py``).

The base class starts the worker, sends it batches and reads their results through the
worker's shared-memory arena, and turns every way a worker can fail into an error of the
batch it was running: an exception (the worker goes on), a crash or a hang (the worker is
replaced; the next batch waits for the new one to load). Calls the worker makes to other
served models (``inferplex.handler.infer``) come back over its pipe and run through
``InstanceSpec.caller``, in-process.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.worker.arena import DEFAULT_SIZE, Arena
from inferplex.backends.worker.worker_process import (
    WorkerFailed,
    WorkerGone,
    WorkerProcess,
    WorkerSilent,
    worker_env,
)
from inferplex.config.model_config import ModelConfig
from inferplex.datatypes import v2_datatype
from inferplex.errors import (
    ConfigError,
    ErrorCode,
    InferplexError,
    ModelExecutionError,
    UnsupportedError,
)
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

#: model parameters of every backend that runs in worker processes
TIMEOUT_PARAMETER = "execute_timeout_seconds"
LOAD_TIMEOUT_PARAMETER = "initialize_timeout_seconds"
ARENA_PARAMETER = "shm_arena_bytes"

DEFAULT_LOAD_TIMEOUT = 120.0

logger = logging.getLogger(__name__)


class WorkerError(InferplexError):
    """An error the worker process reported with a code other than ``internal`` (a bad
    input found by the backend, for example): the client gets that code."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.code = code


class ProcessBackend(Backend):
    """One instance in one worker process. Subclasses call ``_launch`` from ``__init__``."""

    #: who runs in the worker, as error messages name it
    role = "the worker"

    def _launch(
        self,
        config: ModelConfig,
        init: dict[str, Any],
        instance: InstanceSpec,
        cancel_slots: int = 0,
    ) -> None:
        """Start the worker with ``init`` (what ``backends/python/worker.py`` loads) and wait
        until it has loaded; ModelExecutionError with the reason if it cannot. With
        ``cancel_slots`` the worker gets a cancel board for batches of that many requests."""
        self._name = config.name
        self._caller: ModelCaller | None = instance.caller
        self._timeout = number_parameter(config, TIMEOUT_PARAMETER, 0.0)
        self._load_timeout = number_parameter(config, LOAD_TIMEOUT_PARAMETER, DEFAULT_LOAD_TIMEOUT)
        arena_size = int(number_parameter(config, ARENA_PARAMETER, DEFAULT_SIZE))
        env = worker_env(instance.intra_op_threads)
        self._worker = WorkerProcess(init, env, arena_size, cancel_slots)
        try:
            self._start()
        except BaseException:
            self._worker.stop()
            raise

    @property
    def pid(self) -> int | None:
        """The worker's process id (None between a crash and its replacement's start)."""
        return self._worker.pid

    def _start(self) -> None:
        try:
            self._worker.wait_ready(self._load_timeout)
        except WorkerFailed as exc:
            raise ModelExecutionError(f"model '{self._name}': initialize failed: {exc}") from None
        except WorkerGone as exc:
            raise ModelExecutionError(
                f"model '{self._name}': the worker process died while loading ({exc})"
            ) from None
        except WorkerSilent:
            self._worker.kill()
            raise ModelExecutionError(
                f"model '{self._name}': initialize did not finish within "
                f"{self._load_timeout:g} s (parameter {LOAD_TIMEOUT_PARAMETER})"
            ) from None

    def execute(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        done = self._exchange(inputs, (outputs,))
        return self._worker.arena.read(done[1], copy=True)

    def _exchange(self, inputs: dict[str, np.ndarray], request: tuple[Any, ...]) -> tuple[Any, ...]:
        """Send a batch (``inputs`` into the arena, then ("run", headers, *request)), answer
        the worker's calls until it is done, and return its ("done", headers, ...) message;
        the error of the batch for every way the worker can fail."""
        worker = self._worker
        self._start()
        deadline = time.monotonic() + self._timeout if self._timeout else None
        headers, base = worker.arena.write(inputs)
        try:
            worker.send(("run", headers, *request))
            while True:
                message = worker.receive(deadline)
                if message[0] == "done":
                    return tuple(message)
                if message[0] == "error":
                    raise self._failure(message[1], message[2])
                self._answer_call(message, base, deadline)
        except WorkerSilent:
            reason = (
                f"{self.role} did not answer within {self._timeout:g} s "
                f"(parameter {TIMEOUT_PARAMETER})"
            )
            worker.restart()
            logger.warning("model '%s': %s; worker process restarted", self._name, reason)
            raise ModelExecutionError(
                f"model '{self._name}': {reason}; its worker process was restarted"
            ) from None
        except WorkerGone as exc:
            worker.restart()
            logger.warning("model '%s': worker process died (%s); restarted", self._name, exc)
            raise ModelExecutionError(
                f"model '{self._name}': {self.role}'s worker process died while running the "
                f"request ({exc}); it was restarted"
            ) from None

    def _failure(self, why: str, code: str) -> InferplexError:
        """The error for a failure the worker reported, with the code it gave."""
        text = f"model '{self._name}': {self.role} failed: {why}"
        error_code = ErrorCode(code)
        if error_code is ErrorCode.INTERNAL:
            return ModelExecutionError(text)
        return WorkerError(text, error_code)

    def _answer_call(self, message: tuple[Any, ...], base: int, deadline: float | None) -> None:
        """Run a call the worker makes to another served model (its inputs in the arena
        from ``base``) and send back the answer."""
        _, model, version, headers, wanted, timeout = message
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        worker = self._worker
        caller = self._caller
        reply: tuple[Any, ...]
        try:
            if caller is None:
                raise UnsupportedError("this server gives handlers no access to other models")
            tensors = worker.arena.read(headers, copy=True)
            request = InferenceRequest(
                model,
                [Tensor(n, v2_datatype(a.dtype), a.shape, a) for n, a in tensors.items()],
                model_version=version,
                outputs=[RequestedOutput(n) for n in wanted],
            )
            response = caller.infer(request, timeout)
            results = {t.name: t.data for t in response.outputs}
            reply = ("result", worker.arena.write(results, Arena.end(headers, base))[0])
        except InferplexError as exc:
            reply = ("error", exc.code.value, exc.message)
        except TimeoutError:
            reply = (
                "error",
                "deadline_exceeded",
                f"model '{model}' did not answer in {timeout:.3g} s",
            )
        except Exception as exc:
            reply = ("error", "internal", f"calling model '{model}' failed: {exc}")
        worker.send(reply)

    def close(self) -> None:
        """Stop the worker process (it finalizes, then exits): its memory goes back to the
        system."""
        self._worker.stop()


def number_parameter(config: ModelConfig, parameter: str, default: float) -> float:
    """A non-negative number from the model's parameters; ConfigError naming it if not."""
    value = config.parameters.get(parameter)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise ConfigError(
            f"model '{config.name}': parameter {parameter} must be a non-negative number, "
            f"got '{value}'"
        )
    return number
