"""Process isolation for models of in-process backends (ONNX Runtime, PyTorch, plugins).

A model whose config says ``parameters { key: "isolation" value: { string_value: "process" }
}`` (config.yaml: ``parameters: {isolation: process}``) runs each instance's backend in a
worker process of its own, started at load and ended at unload, so that everything the
runtime keeps (arenas, thread pools, caches that ``malloc_trim`` cannot return) goes back to
the system with the process. Batches travel through the worker's shared-memory arena, as a
Python model's do (``backends/worker/process_backend.py``, ``backends/python/worker.py``); a
crash or a hang fails only the batch that instance was running, and the worker is replaced.

Server side: ``served_backend`` picks ``IsolatedBackend`` for such a model. Worker side:
``load_backend`` (named in the worker's init message) creates the real backend there.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from inferplex.backends import backend_for
from inferplex.backends.base import Backend, InstanceSpec
from inferplex.backends.worker.process_backend import ProcessBackend
from inferplex.config.model_config import ModelConfig
from inferplex.errors import ConfigError
from inferplex.security.encryption import process_key, use_key

#: model parameter: where the model's instances run
ISOLATION_PARAMETER = "isolation"
#: its values: in the server's process (the default), or each instance in a worker process
ISOLATION_MODES = ("none", "process")


def isolation(config: ModelConfig) -> str:
    """The model's isolation mode; ConfigError naming the parameter if it is unknown."""
    value = config.parameters.get(ISOLATION_PARAMETER, "none")
    if value not in ISOLATION_MODES:
        raise ConfigError(
            f"model '{config.name}': parameter {ISOLATION_PARAMETER} must be one of "
            f"{', '.join(repr(m) for m in ISOLATION_MODES)}, got {value!r}"
        )
    return value


def served_backend(backend: type[Backend], config: ModelConfig) -> type[Backend]:
    """The class that serves the model: ``backend``, or IsolatedBackend when the config asks
    for process isolation. ConfigError for a bad mode or a backend that only calls other
    models (a pipeline, a cascade, a remote model: nothing of its own to isolate)."""
    if isolation(config) == "none" or issubclass(backend, ProcessBackend):
        return backend  # a Python model's instances run in worker processes anyway
    if backend.composite:
        raise ConfigError(
            f"model '{config.name}': parameter {ISOLATION_PARAMETER} 'process' applies to "
            f"backends that run a model (onnxruntime, pytorch, ...); backend "
            f"'{backend.names[0]}' only calls other models"
        )
    return IsolatedBackend


class IsolatedBackend(ProcessBackend):
    """One instance of the model's own backend (as the config names it), in a worker
    process."""

    def __init__(self, model_path: Path, config: ModelConfig, instance: InstanceSpec) -> None:
        inner = backend_for(config)
        self.role = f"the {inner.names[0]} backend"
        init = {
            "loader": f"{__name__}:{load_backend.__name__}",
            "model_file": str(model_path.resolve()),
            "backend": inner,  # pickled by reference: the worker imports it
            "config": config,
            # the caller stays here: the worker's calls to other models come back over its pipe
            "instance": dataclasses.replace(instance, caller=None),
            "model_key": process_key(),
        }
        self._launch(config, init, instance)


class BackendRunner:
    """Worker side: a backend running the batches the server sends."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        return self._backend.execute(inputs, outputs)

    def finalize(self) -> None:
        self._backend.close()


def load_backend(init: dict[str, Any]) -> BackendRunner:
    """Worker side: create the backend the init message names (backends/python/worker.py
    calls it)."""
    use_key(init["model_key"])  # the server's key for encrypted models, if it has one
    cls: type[Backend] = init["backend"]
    return BackendRunner(cls(Path(init["model_file"]), init["config"], init["instance"]))
