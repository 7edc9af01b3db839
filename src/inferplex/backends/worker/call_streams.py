"""The server's side of a worker's streamed calls (``StreamOpen`` / ``StreamNext`` /
``StreamCancel`` of ``messages.py``): a handler calling a decoupled model reads its responses
one at a time while its batch runs.

The calls a batch opens end with it: whatever is still open when the batch ends (the handler
stopped reading, returned or failed) is stopped, and so is everything when every request of
the batch lost its caller. A stopped call's model sees its request cancelled.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

from inferplex.backends.base import CalledResponse, CallStopped, CallStream, ModelCaller
from inferplex.backends.worker.arena import Arena
from inferplex.backends.worker.messages import (
    Call,
    Failure,
    StreamCancel,
    StreamItem,
    StreamNext,
    StreamOpen,
    StreamOpened,
    StreamRequest,
    Wire,
)
from inferplex.datatypes import v2_datatype
from inferplex.errors import ErrorCode, InferplexError, UnsupportedError
from inferplex.types import InferenceRequest, RequestedOutput, Tensor

#: the response a call stopped by its caller (or ended with its batch) ends with
STOPPED = Failure(ErrorCode.UNAVAILABLE, "the call has no more responses", stopped=True)


def call_request(arena: Arena, call: Call) -> InferenceRequest:
    """The request of a worker's call, its inputs copied out of the arena (the worker writes
    its next call there)."""
    tensors = arena.read(call.inputs, copy=True)
    return InferenceRequest(
        call.model,
        [Tensor(n, v2_datatype(a.dtype), a.shape, a) for n, a in tensors.items()],
        model_version=call.version,
        outputs=[RequestedOutput(n) for n in call.outputs],
    )


@dataclass(frozen=True, slots=True)
class LinkEnd:
    """Where the server answers what the worker's link asks while a batch runs: the pipe and
    the arena it came by, the first offset of that arena free for answers (past the running
    batch's inputs, where the link shares the worker's arena) and the batch's deadline."""

    wire: Wire
    arena: Arena
    base: int
    deadline: float | None


def call_deadline(timeout: float | None, deadline: float | None) -> float | None:
    """When a call the handler makes times out: its own ``timeout`` (seconds from now) or
    its batch's ``deadline``, whichever comes first."""
    until = None if timeout is None else time.monotonic() + timeout
    if deadline is not None:
        until = deadline if until is None else min(until, deadline)
    return until


class _Open:
    """One open call: its stream (or why it could not start) and when it times out."""

    __slots__ = ("stream", "until")

    def __init__(self, stream: CallStream | InferplexError, until: float | None) -> None:
        self.stream = stream
        self.until = until


class StreamedCalls:
    """The streamed calls of the batch a worker runs; used by the instance's thread, except
    ``stop_all`` (any thread)."""

    def __init__(self, caller: ModelCaller | None) -> None:
        self._caller = caller
        self._numbers = itertools.count(1)
        self._open: dict[int, _Open] = {}
        #: the running batch's number here (a cancellation that comes late finds another)
        self.batch = 0
        # the batch's cancellation may stop its calls from the event loop
        self._lock = threading.Lock()

    def handle(self, message: StreamRequest, end: LinkEnd) -> None:
        """Answer one message of the worker."""
        match message:
            case StreamOpen(call):
                end.wire.send(StreamOpened(self._start(call, end)))
            case StreamNext(stream):
                end.wire.send(self._item(stream, end))
            case StreamCancel(stream):
                self._stop(stream)

    def _start(self, call: Call, end: LinkEnd) -> int:
        until = call_deadline(call.timeout, end.deadline)
        stream: CallStream | InferplexError
        if self._caller is None:
            stream = UnsupportedError("this server gives handlers no access to other models")
        else:
            request = call_request(end.arena, call)
            try:
                stream = self._caller.stream(request)
            except InferplexError as exc:
                stream = exc
        number = next(self._numbers)
        with self._lock:
            self._open[number] = _Open(stream, until)
        return number

    def _item(self, number: int, end: LinkEnd) -> StreamItem:
        with self._lock:
            call = self._open.get(number)
        if call is None:
            return StreamItem(None, STOPPED, True)
        stream = call.stream
        if isinstance(stream, InferplexError):
            response = CalledResponse(None, stream)
        else:
            wait = None if call.until is None else max(0.0, call.until - time.monotonic())
            response = stream.next(wait)
        if response.final:
            with self._lock:
                self._open.pop(number, None)
        headers = None
        if response.outputs is not None:
            headers = end.arena.write(response.outputs, end.base)[0]
        error = response.error
        if error is None:
            return StreamItem(headers, None, response.final)
        stopped = isinstance(error, CallStopped)
        return StreamItem(headers, Failure(error.code, error.message, stopped), response.final)

    def _stop(self, number: int) -> None:
        with self._lock:
            call = self._open.get(number)
        if call is not None:
            _close([call])

    def stop_all(self, batch: int) -> None:
        """Stop every open call of batch number ``batch`` (``batch`` when it started), whose
        callers all went away; nothing once that batch ended."""
        with self._lock:
            calls = list(self._open.values()) if batch == self.batch else []
        _close(calls)

    def end_batch(self) -> None:
        """The batch ended: its calls end with it (their models see them cancelled)."""
        with self._lock:
            self.batch += 1
            if not self._open:
                return
            calls, self._open = list(self._open.values()), {}
        _close(calls)


def _close(calls: list[_Open]) -> None:
    for call in calls:
        if not isinstance(call.stream, InferplexError):
            call.stream.close()
