"""The runner of a handler's style: Triton's (``execute``) or TorchServe's."""

from __future__ import annotations

from typing import Any

from inferplex.backends.python.runner import HandlerRunner
from inferplex.backends.python.torchserve_runner import TorchServeRunner
from inferplex.backends.python.triton_runner import TritonRunner
from inferplex.handler.base import Context


def make_runner(handler: Any, context: Context) -> HandlerRunner:
    """The runner of ``handler``'s style (which initializes it)."""
    if callable(getattr(handler, "execute", None)):
        return TritonRunner(handler, context)
    return TorchServeRunner(handler, context)
