"""The Python backend: a user's model.py, each instance in its own worker process.

A crash, an exception or a hang in user code fails only the batch that instance was running,
with a ModelExecutionError that names the model and what happened; after a crash or a hang
the worker is replaced (the next batch waits for the new one to load). Tensors cross the
process boundary through the worker's shared-memory arena; calls the handler makes to other
served models (``inferplex.handler.infer``) come back over the worker's pipe and run through
``InstanceSpec.caller``, in-process.
"""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from inferplex.backends.base import Backend, InstanceSpec, ModelCaller
from inferplex.backends.python.process import (
    WorkerFailed,
    WorkerGone,
    WorkerProcess,
    WorkerSilent,
    worker_env,
)
from inferplex.config.model_config import ModelConfig
from inferplex.core.datatypes import v2_datatype
from inferplex.core.types import InferenceRequest, RequestedOutput, Tensor
from inferplex.errors import ConfigError, InferplexError, ModelExecutionError, UnsupportedError
from inferplex.handler.arena import DEFAULT_SIZE, Arena

#: model parameters of the python backend
CLASS_PARAMETER = "handler_class"
TIMEOUT_PARAMETER = "execute_timeout_seconds"
LOAD_TIMEOUT_PARAMETER = "initialize_timeout_seconds"
ARENA_PARAMETER = "shm_arena_bytes"
SLOT_PARAMETER = "compute_slot"

DEFAULT_LOAD_TIMEOUT = 120.0

_instance_numbers = itertools.count()

logger = logging.getLogger(__name__)


class PythonBackend(Backend):
    names = ("python",)
    default_model_filename = "model.py"

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        self._name = config.name
        self._caller: ModelCaller | None = instance.caller
        # A handler that waits on the models it calls while holding one of the scheduler's
        # compute slots could starve them of slots (a deadlock with as many instances as
        # slots). So by default its batches take none, like a pipeline's; its own work runs
        # in its worker process, bounded by the instance count. A compute-heavy handler that
        # calls no models can ask for a slot.
        self.composite = not _flag(config, SLOT_PARAMETER)
        self._timeout = _number(config, TIMEOUT_PARAMETER, 0.0)
        self._load_timeout = _number(config, LOAD_TIMEOUT_PARAMETER, DEFAULT_LOAD_TIMEOUT)
        gpu = instance.kind == "KIND_GPU"
        init = {
            "model_file": str(model_path.resolve()),
            "model_name": config.name,
            "model_version": model_path.parent.name,
            "config": config.to_triton_dict(),
            "instance_name": f"{config.name}_{next(_instance_numbers)}",
            "instance_kind": "GPU" if gpu else "CPU",
            "device_id": instance.device_id,
            "handler_class": config.parameters.get(CLASS_PARAMETER, ""),
        }
        arena_size = int(_number(config, ARENA_PARAMETER, DEFAULT_SIZE))
        self._worker = WorkerProcess(init, worker_env(instance.intra_op_threads), arena_size)
        try:
            self._start()
        except BaseException:
            self._worker.stop()
            raise

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
        worker = self._worker
        self._start()
        deadline = time.monotonic() + self._timeout if self._timeout else None
        headers, base = worker.arena.write(inputs)
        try:
            worker.send(("run", headers, outputs))
            while True:
                message = worker.receive(deadline)
                if message[0] == "done":
                    return worker.arena.read(message[1], copy=True)
                if message[0] == "error":
                    raise ModelExecutionError(
                        f"model '{self._name}': the handler failed: {message[1]}"
                    )
                self._answer_call(message, base, deadline)
        except WorkerSilent:
            reason = (
                f"the handler did not answer within {self._timeout:g} s "
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
                f"model '{self._name}': the handler's worker process died while running the "
                f"request ({exc}); it was restarted"
            ) from None

    def _answer_call(self, message: tuple[Any, ...], base: int, deadline: float | None) -> None:
        """Run a call the handler makes to another served model (its inputs in the arena
        from ``base``) and send back the answer."""
        _, model, version, headers, wanted, timeout = message
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        worker = self._worker
        reply: tuple[Any, ...]
        try:
            if self._caller is None:
                raise UnsupportedError("this server gives handlers no access to other models")
            tensors = worker.arena.read(headers, copy=True)
            request = InferenceRequest(
                model,
                [Tensor(n, v2_datatype(a.dtype), a.shape, a) for n, a in tensors.items()],
                model_version=version,
                outputs=[RequestedOutput(n) for n in wanted],
            )
            response = self._caller.infer(request, timeout)
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
        self._worker.stop()

    @classmethod
    def gpu_available(cls) -> bool:
        # The handler places its own work (context.device_id); the NVIDIA driver's device
        # node tells there is a GPU to place it on without loading CUDA in the server.
        return Path("/dev/nvidiactl").exists()


def _number(config: ModelConfig, parameter: str, default: float) -> float:
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


def _flag(config: ModelConfig, parameter: str) -> bool:
    value = config.parameters.get(parameter, "false").lower()
    if value not in ("true", "false"):
        raise ConfigError(
            f"model '{config.name}': parameter {parameter} must be true or false, got '{value}'"
        )
    return value == "true"
