"""A Python model's config completed by the model itself: Triton's
``auto_complete_config(auto_complete_model_config)``, run in a process of its own
(``autocomplete.py``) when the model loads, before its instances start.

As in Triton, the model may add inputs and outputs, set ``max_batch_size``, ask for the
dynamic batcher and set the transaction policy; what the config file says stays, and a
contradiction fails the load. The process is started only for a model.py that defines the
method (its source names it), so other Python models load as fast as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferplex.backends.worker.process_backend import (
    DEFAULT_LOAD_TIMEOUT,
    LOAD_TIMEOUT_PARAMETER,
    number_parameter,
)
from inferplex.backends.worker.worker_process import worker_env
from inferplex.config.model_config import ModelConfig
from inferplex.config.readers import config_from_dict
from inferplex.errors import ConfigError

METHOD = "auto_complete_config"
MODULE = "inferplex.backends.python.autocomplete"
#: what auto_complete_config may change (Triton's ModelConfig methods)
FIELDS = ("max_batch_size", "input", "output", "dynamic_batching", "model_transaction_policy")


def auto_complete(
    model_file: Path, config: ModelConfig | None, name: str, handler_class: str
) -> ModelConfig | None:
    """``config`` (None: no config file) as the model's ``auto_complete_config`` completes
    it; unchanged when model.py defines none. ConfigError with the reason if it fails."""
    if METHOD not in model_file.read_text(encoding="utf-8", errors="replace"):
        return config
    base = config if config is not None else ModelConfig(name=name)
    given = base.to_triton_dict()
    if not base.model_transaction_policy.decoupled:
        # unset, as in Triton, so that the model may still set it
        del given["model_transaction_policy"]
    request = {"model_file": str(model_file), "config": given, "handler_class": handler_class}
    raw = _run(request, name, number_parameter(base, LOAD_TIMEOUT_PARAMETER, DEFAULT_LOAD_TIMEOUT))
    changed = {key: raw[key] for key in FIELDS if key in raw}
    source = f"model '{name}': {METHOD}"
    completed = config_from_dict({"name": name, **changed}, name, source)
    fields = dict(base)
    fields.update({key: getattr(completed, key) for key in changed})
    try:
        return ModelConfig(**fields)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _run(request: dict[str, Any], name: str, timeout: float) -> dict[str, Any]:
    """The completed config the process answers; ConfigError with what went wrong."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", MODULE],
            input=json.dumps(request),
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout,
            env=worker_env(1),
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"model '{name}': {METHOD} did not finish within {timeout:g} s "
            f"(parameter {LOAD_TIMEOUT_PARAMETER})"
        ) from None
    try:
        answer: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise ConfigError(
            f"model '{name}': the process running {METHOD} ended without an answer "
            f"(exit code {done.returncode})"
        ) from None
    if "error" in answer:
        raise ConfigError(f"model '{name}': {METHOD} failed: {answer['error']}")
    config: dict[str, Any] = answer["config"]
    return config
