"""Backends, found by the config's ``backend`` or ``platform`` name.

Built-in backends are listed here; third-party ones register a Backend subclass under the
``inferplex.backends`` entry-point group.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

from inferplex.errors import ConfigError

if TYPE_CHECKING:
    from inferplex.backends.base import Backend, InstanceSpec
    from inferplex.config.model_config import ModelConfig

__all__ = ["Backend", "InstanceSpec", "available_backends", "backend_for", "backend_for_file"]


def __getattr__(name: str) -> Any:
    # Imported on first use: a worker process (python -m inferplex.backends.python.worker)
    # imports this package, and must start without the config models (pydantic) behind them.
    if name in ("Backend", "InstanceSpec"):
        return getattr(importlib.import_module("inferplex.backends.base"), name)
    raise AttributeError(f"module 'inferplex.backends' has no attribute '{name}'")


def available_backends() -> list[type[Backend]]:
    from inferplex.backends.cascade import CascadeBackend, SizeRoutingBackend
    from inferplex.backends.ensemble import EnsembleBackend
    from inferplex.backends.llm import LlmBackend  # imports torch only when loading
    from inferplex.backends.onnxruntime import OnnxRuntimeBackend
    from inferplex.backends.python import PythonBackend
    from inferplex.backends.pytorch import PyTorchBackend  # imports torch only when loading
    from inferplex.backends.remote import RemoteBackend

    found: list[type[Backend]] = [OnnxRuntimeBackend, PyTorchBackend, PythonBackend]
    found += [EnsembleBackend, CascadeBackend, SizeRoutingBackend, RemoteBackend, LlmBackend]
    found += _plugin_backends()
    return found


@functools.cache
def _plugin_backends() -> tuple[type[Backend], ...]:
    """Third-party backends, read once per process: reading the entry points scans every
    installed distribution, tens of ms of GIL-holding work that would slow every model load
    (and the requests served meanwhile)."""
    from importlib.metadata import entry_points

    return tuple(entry.load() for entry in entry_points(group="inferplex.backends"))


def backend_for(config: ModelConfig) -> type[Backend]:
    """The backend class a config asks for; ConfigError naming the accepted values if none."""
    backends = available_backends()
    for cls in backends:
        if config.backend and config.backend in cls.names:
            return cls
        if not config.backend and config.platform in cls.platforms:
            return cls
    accepted = sorted({n for c in backends for n in (*c.names, *c.platforms)})
    asked = f"backend '{config.backend}'" if config.backend else f"platform '{config.platform}'"
    raise ConfigError(f"model '{config.name}': {asked} is not served, expected one of {accepted}")


def backend_for_file(filename: str) -> type[Backend] | None:
    """The backend whose default model file has this name (for configs that name none)."""
    for cls in available_backends():
        if cls.default_model_filename == filename:
            return cls
    return None
