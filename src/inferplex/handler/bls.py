"""Calling other served models from a handler, in-process (business logic between models, as
Triton's BLS): the call goes over the worker's pipe to the server, which runs it through the
engine like any request, without a network hop. Tensors travel through the worker's arena."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from inferplex.handler.arena import Arena


class ModelCallError(Exception):
    """A call to another served model failed. ``code`` is the server's error code (e.g.
    ``not_found``, ``invalid_argument``, ``deadline_exceeded``)."""

    def __init__(self, message: str, code: str = "internal") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Link:
    """The worker's way back to the server while a request runs. Calls from several threads
    of one handler take turns: the pipe and the arena carry one call at a time."""

    def __init__(self, connection: Connection, arena: Arena) -> None:
        self._connection = connection
        self._arena = arena
        self._lock = threading.Lock()
        self._base = -1  # first arena offset free for calls; -1 while no request runs

    def begin(self, base: int) -> None:
        """A request whose inputs end at arena offset ``base`` starts running."""
        self._base = base

    def end(self) -> None:
        self._base = -1

    def call(
        self,
        model_name: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None,
        version: str,
        timeout: float | None,
    ) -> dict[str, np.ndarray]:
        with self._lock:
            if self._base < 0:
                raise ModelCallError(
                    "other models can be called only while the handler runs a request "
                    "(not in initialize or finalize)",
                    "unavailable",
                )
            headers, _ = self._arena.write(inputs, self._base)
            self._connection.send(
                ("infer", model_name, version, headers, list(outputs or ()), timeout)
            )
            reply = self._connection.recv()
            if reply[0] == "error":
                raise ModelCallError(reply[2], reply[1])
            # copies: the next call reuses this part of the arena
            return self._arena.read(reply[1], copy=True)


_link: Link | None = None


def install(link: Link) -> None:
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
