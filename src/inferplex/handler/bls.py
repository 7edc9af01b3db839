"""Calling other served models from a handler, in-process (business logic between models, as
Triton's BLS): the call goes over the worker's pipe to the server, which runs it through the
engine like any request, without a network hop. Tensors travel through the worker's arena.

``infer`` waits for its answer; ``infer_async`` (in an ``async def execute``) returns an
asyncio future at once: the calls started in one turn of the event loop (say, the ones an
``asyncio.gather`` waits for) go to the server in one message and run there at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np


class ModelCallError(Exception):
    """A call to another served model failed. ``code`` is the server's error code (e.g.
    ``not_found``, ``invalid_argument``, ``deadline_exceeded``)."""

    def __init__(self, message: str, code: str = "internal") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class Call(NamedTuple):
    """One call: what ``infer`` takes."""

    model_name: str
    inputs: Mapping[str, Any]
    outputs: Sequence[str] | None
    version: str
    timeout: float | None


Answer = dict[str, np.ndarray] | ModelCallError


class Caller(Protocol):
    """The worker's way back to the server (``inferplex.backends.python.worker.Link``)."""

    def call_many(self, calls: Sequence[Call]) -> list[Answer]:
        """Run the calls in the server, at once; their outputs or why each failed."""
        ...


_link: Caller | None = None
#: per event loop, the calls started in its current turn, with their futures
_pending: dict[asyncio.AbstractEventLoop, list[tuple[Call, asyncio.Future[Any]]]] = {}


def install(link: Caller) -> None:
    """Called once by the worker process."""
    global _link
    _link = link


def _caller() -> Caller:
    if _link is None:
        raise ModelCallError(
            "inferplex.handler.infer works inside a model served by inferplex's python backend",
            "unavailable",
        )
    return _link


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
    (answer,) = _caller().call_many([Call(model_name, inputs, outputs, version, timeout)])
    if isinstance(answer, ModelCallError):
        raise answer
    return answer


def infer_async(
    model_name: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    *,
    version: str = "",
    timeout: float | None = None,
) -> asyncio.Future[dict[str, np.ndarray]]:
    """``infer`` without waiting, from a coroutine: a future of the outputs (or of the
    ModelCallError). The calls started before the event loop's next turn run at once."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[dict[str, np.ndarray]] = loop.create_future()
    pending = _pending.setdefault(loop, [])
    if not pending:
        loop.call_soon(_send, loop)
    pending.append((Call(model_name, inputs, outputs, version, timeout), future))
    return future


def _send(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's pending calls, in one message, from a thread of its executor (the loop
    goes on meanwhile)."""
    group = _pending.pop(loop)
    calls = [call for call, _ in group]

    def settle(done: asyncio.Future[list[Answer]]) -> None:
        failure = done.exception()
        answers = done.result() if failure is None else [failure] * len(group)
        for (_, future), answer in zip(group, answers, strict=True):
            if future.cancelled():  # the handler stopped waiting for it
                continue
            if isinstance(answer, BaseException):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    loop.run_in_executor(None, _run, calls).add_done_callback(settle)


def _run(calls: list[Call]) -> list[Answer]:
    return _caller().call_many(calls)
