"""Calling other served models from a handler, in-process (business logic between models, as
Triton's BLS): the call goes over the worker's pipe to the server, which runs it through the
engine like any request, without a network hop. Tensors travel through the worker's arena.

``infer`` waits for its answer; ``infer_async`` (in an ``async def execute``) returns an
asyncio future at once: the calls started in one turn of the event loop (say, the ones an
``asyncio.gather`` waits for) go to the server in one message and run there at once.

``infer_stream`` (``infer_stream_async``) reads the responses of a call as the model sends
them: a decoupled model's 0..N and a final one, an ordinary model's one (Triton's
``exec(decoupled=True)``). The server fetches each when the handler asks for it, so a handler
that reads slowly holds the called model back; a call the handler leaves unfinished is
stopped when its batch ends (``cancel()`` stops it at once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import numpy as np

from inferplex.errors import ErrorCode

#: the code of the response a stopped streamed call ends with (``CallResponses.cancel``:
#: Triton's TritonError.CANCELLED)
STOPPED = "cancelled"


class ModelCallError(Exception):
    """A call to another served model failed. ``code`` is the server's error code (e.g.
    ``not_found``, ``invalid_argument``, ``deadline_exceeded``; ``cancelled`` for a
    streamed call that was stopped)."""

    def __init__(self, message: str, code: str = ErrorCode.INTERNAL.value) -> None:
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


class Streamed(NamedTuple):
    """One response of a streamed call: its outputs (None: a response without any, as the
    final flag a decoupled model sends alone), or the error it carries; ``final`` for the
    last."""

    outputs: dict[str, np.ndarray] | None
    error: ModelCallError | None
    final: bool


class Caller(Protocol):
    """The worker's way back to the server (``inferplex.backends.python.worker.Link``)."""

    def call_many(self, calls: Sequence[Call]) -> list[Answer]:
        """Run the calls in the server, at once; their outputs or why each failed."""
        ...

    def open_stream(self, call: Call) -> int:
        """Start a call whose responses are read as they come; its number."""
        ...

    def next_response(self, stream: int) -> Streamed:
        """The next response of an open call (waits for it)."""
        ...

    def cancel_stream(self, stream: int) -> None:
        """Stop an open call (its model sees its request cancelled)."""
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
            ErrorCode.UNAVAILABLE.value,
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


T = TypeVar("T")


class CallResponses(Generic[T]):
    """The responses of one call as the model sends them, each made a ``T`` by ``make``:
    ``for`` waits for each in this thread, ``async for`` in an executor thread. Ends after
    the final one."""

    def __init__(self, stream: int | ModelCallError, make: Callable[[Streamed], T]) -> None:
        self._stream = stream  # the call's number, or why it did not start
        self._make = make
        self._done = False

    def __iter__(self) -> CallResponses[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        return self._make(self._take())

    def __aiter__(self) -> CallResponses[T]:
        return self

    async def __anext__(self) -> T:
        if self._done:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        return self._make(await loop.run_in_executor(None, self._take))

    def _take(self) -> Streamed:
        stream = self._stream
        if isinstance(stream, ModelCallError):
            item = Streamed(None, stream, True)
        else:
            try:
                item = _caller().next_response(stream)
            except ModelCallError as exc:
                item = Streamed(None, exc, True)
        self._done = item.final
        return item

    def cancel(self) -> None:
        """Stop the call: its model sees its request cancelled; the next response read is
        the final one, an error with code ``cancelled`` (unless it had ended)."""
        if not self._done and not isinstance(self._stream, ModelCallError):
            _caller().cancel_stream(self._stream)


def _same(item: Streamed) -> Streamed:
    return item


def infer_stream(
    model_name: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    *,
    version: str = "",
    timeout: float | None = None,
) -> CallResponses[Streamed]:
    """Run another served model and read its responses as it sends them (a decoupled
    model's; an ordinary model's one): an iterator of ``Streamed`` whose last is ``final``.
    Errors come as responses (``error``), not raised. ``timeout`` bounds the whole call."""
    return open_stream(Call(model_name, inputs, outputs, version, timeout), _same)


def infer_stream_async(
    model_name: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    *,
    version: str = "",
    timeout: float | None = None,
) -> asyncio.Future[CallResponses[Streamed]]:
    """``infer_stream`` from a coroutine: a future of the responses, the call started from
    an executor thread (the loop goes on meanwhile)."""
    return open_stream_async(Call(model_name, inputs, outputs, version, timeout), _same)


def open_stream(call: Call, make: Callable[[Streamed], T]) -> CallResponses[T]:
    """Start ``call``; its responses, each made a ``T`` by ``make``."""
    try:
        return CallResponses(_caller().open_stream(call), make)
    except ModelCallError as exc:
        return CallResponses(exc, make)


def open_stream_async(
    call: Call, make: Callable[[Streamed], T]
) -> asyncio.Future[CallResponses[T]]:
    """``open_stream`` from a coroutine, without waiting on the loop."""
    return asyncio.get_running_loop().run_in_executor(None, open_stream, call, make)
