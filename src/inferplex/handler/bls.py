"""Calling other served models from a handler, in-process (business logic between models, as
Triton's BLS): the call goes over the worker's pipe to the server, which runs it through the
engine like any request, without a network hop. Tensors travel through the worker's arena."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class ModelCallError(Exception):
    """A call to another served model failed. ``code`` is the server's error code (e.g.
    ``not_found``, ``invalid_argument``, ``deadline_exceeded``)."""

    def __init__(self, message: str, code: str = "internal") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Caller(Protocol):
    """The worker's way back to the server (``inferplex.backends.python.worker.Link``)."""

    def call(
        self,
        model_name: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None,
        version: str,
        timeout: float | None,
    ) -> dict[str, np.ndarray]:
        """Run ``model_name`` in the server; raises ModelCallError."""
        ...


_link: Caller | None = None


def install(link: Caller) -> None:
    """Called once by the worker process."""
    global _link
    _link = link


def infer(
    model_name: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    *,
    version: str = "",
    timeout: float | None = None,
) -> dict[str, np.ndarray]:
    """Run another model served by this server and return its outputs by name.

    ``inputs`` maps input names to numpy arrays (BYTES: object arrays of ``bytes`` or
    ``str``, or ``S``/``U`` arrays). ``outputs`` lists the outputs wanted (default: all).
    ``version`` is empty for the model's latest version. ``timeout`` is in seconds; the
    request's own ``execute_timeout_seconds`` bounds it too. Raises ModelCallError.
    """
    if _link is None:
        raise ModelCallError(
            "inferplex.handler.infer works inside a model served by inferplex's python backend",
            "unavailable",
        )
    return _link.call(model_name, inputs, outputs, version, timeout)
