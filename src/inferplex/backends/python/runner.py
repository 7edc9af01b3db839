"""Loading a user's model.py in the worker, and what the runners of both handler styles share.

* Triton python-backend style (``triton_runner.py``) — the class has ``execute(requests)``.
* TorchServe style (``torchserve_runner.py``) — ``handle(data, context)`` (``BaseHandler``
  provides it) or at least ``inference``; see ``inferplex.handler.base``.

``styles.make_runner`` picks the runner for a handler. Either way the outputs are cast to the
datatypes the model's config declares (``outputs.py``).
"""

from __future__ import annotations

import abc
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from inferplex.backends.python.outputs import DeclaredOutputs, HandlerError
from inferplex.backends.python.senders import Respond
from inferplex.backends.worker.messages import RequestFailed, RequestInfo
from inferplex.handler.base import Context, never

#: the classes looked for when the config names none (Triton's name first)
DEFAULT_CLASSES = ("TritonPythonModel", "Handler")

__all__ = ["HandlerError", "HandlerRunner", "find_class", "load_module"]


@dataclass(slots=True)  # not frozen: made per batch, and a frozen __init__ costs µs
class BatchResult:
    """A batch's answer: the outputs of the requests that did not fail (their rows in order)
    and those that failed. A decoupled model's requests answered through their senders have
    no outputs here; ``still_open``: those whose final response is still to come (the
    numbers of the requests whose senders threads the model started still hold)."""

    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    failed: list[RequestFailed] = field(default_factory=list)
    still_open: tuple[int, ...] = ()


class HandlerRunner(abc.ABC):
    """A loaded handler of one style: ``run_requests`` runs a batch, ``finalize`` ends."""

    def __init__(self, handler: Any, context: Context) -> None:
        self.handler = handler
        self.context = context
        self.outputs = DeclaredOutputs(context.config)
        #: sends 0..N responses per request (model_transaction_policy { decoupled: true })
        self.decoupled = bool(
            context.config.get("model_transaction_policy", {}).get("decoupled", False)
        )

    @property
    def batched(self) -> bool:
        return self.outputs.batched

    def rows(self, inputs: dict[str, np.ndarray]) -> int:
        """The batch's rows (1 for a model without batching)."""
        return len(next(iter(inputs.values()))) if self.batched and inputs else 1

    @abc.abstractmethod
    def run_requests(
        self,
        inputs: dict[str, np.ndarray],
        outputs: list[str],
        requests: Sequence[RequestInfo],
        cancelled: Callable[[int], bool] = never,
        respond: Respond | None = None,
    ) -> BatchResult:
        """One batch with who asked for its rows. ``cancelled(index)`` tells whether a
        request's caller went away; a decoupled model sends its responses with ``respond``
        as they come (by ``RequestInfo.number``)."""

    @abc.abstractmethod
    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """One batch as one request: input name -> array in, the requested outputs out."""

    def finalize(self) -> None:
        if callable(getattr(self.handler, "finalize", None)):
            self.handler.finalize()


class ModuleHandler:
    """A TorchServe module-level entry point, ``handle(data, context)`` in model.py, as a
    handler: called once with ``data`` None to initialize (as TorchServe does), then once
    per batch."""

    def __init__(self, entry: Callable[[Any, Context], Any]) -> None:
        self._entry = entry

    def initialize(self, context: Context) -> None:
        self._entry(None, context)

    def handle(self, data: list[dict[str, Any]], context: Context) -> Any:
        return self._entry(data, context)


def load_module(path: Path) -> ModuleType:
    """Import the user's model.py; its folder goes on ``sys.path`` for its own imports."""
    # no __pycache__ written into the model repository (a change a watcher would notice)
    sys.dont_write_bytecode = True
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"inferplex_model_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise HandlerError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def find_class(module: ModuleType, name: str) -> Callable[[], Any]:
    """The handler class: ``name`` if given, else TritonPythonModel or Handler, else the one
    class the module itself defines that has execute, handle or inference (TorchServe's
    rule)."""
    if name:
        found = getattr(module, name, None)
        if not inspect.isclass(found):
            raise HandlerError(
                f"model.py defines no class '{name}' (config parameter handler_class)"
            )
        return found
    for default in DEFAULT_CLASSES:
        found = getattr(module, default, None)
        if inspect.isclass(found):
            return found
    candidates = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
        and any(callable(getattr(cls, m, None)) for m in ("execute", "handle", "inference"))
    ]
    entry = getattr(module, "handle", None)
    if not candidates and inspect.isfunction(entry) and entry.__module__ == module.__name__:
        return lambda: ModuleHandler(entry)
    if len(candidates) != 1:
        found_names = ", ".join(c.__name__ for c in candidates) or "none"
        raise HandlerError(
            f"model.py must define a class {' or '.join(DEFAULT_CLASSES)}, or exactly one class "
            f"with execute, handle or inference (found: {found_names}), or a function "
            "handle(data, context); or name a class in the config parameter handler_class"
        )
    return candidates[0]
