"""Every message between the server and a worker process (``worker_process.py`` on the
server's side, ``backends/python/worker.py`` in the worker), as frozen dataclasses: each
receiver has one ``match`` over the classes it can get, and an error always travels as a
``Failure`` (an ``ErrorCode`` and its message, in that order). vLLM v1's ``EngineCoreRequest``
and Triton python_backend's ``ipc_message.h`` are the same idea.

Messages are pickled over the worker's socket (``multiprocessing.connection`` framing); they
carry small things only. Tensors never do: their bytes are in the worker's shared-memory
arena (``arena.py``) and a message carries their ``Header``s.

  server -> worker
    Init            the model to load                        -> Ready | LoadFailed
    RunBatch        a batch (inputs in the arena)            -> BatchDone | BatchFailed, with
                                                                any of the worker's requests
                                                                below before it
    CallAnswers     the answers to a worker's ``Calls``
    StreamOpened    the number of a streamed call (answers ``StreamOpen``)
    StreamItem      one response of a streamed call (answers ``StreamNext``)
    Sent            a response was queued for its client (answers ``Response``)
    Stop            finalize and exit

  worker -> server
    Calls           calls to other served models (BLS), run at once     -> CallAnswers
    StreamOpen / StreamNext / StreamCancel   a call whose responses the handler reads as
                    they come (``call_streams.py``)                     -> StreamOpened /
                                                                           StreamItem / -
    Response        a decoupled model's response to one request          -> Sent
    MetricUpdates   custom metric changes, ahead of ``Ready`` and of a batch's answer

A worker pulls a streamed call's responses one at a time and waits for ``Sent`` after each
response it sends, so a slow reader holds the sender back through the server's bounded
response channel (``--stream-queue-responses``) instead of piling responses up in either
process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inferplex.backends.worker.arena import Header
from inferplex.errors import ErrorCode, InferplexError


@dataclass(frozen=True, slots=True)
class Failure:
    """Why something failed: the server's error code and the message. ``stopped``: a
    streamed call its caller stopped (Triton's ``TritonError.CANCELLED``)."""

    code: ErrorCode
    message: str
    stopped: bool = False

    @classmethod
    def of(cls, error: InferplexError) -> Failure:
        return cls(error.code, error.message)


# -- server -> worker ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Init:
    """What the worker loads: a handler's settings, or (``"loader"``) an isolated model's."""

    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """One client request of a batch: its id, parameters and rows of the batch (in order).
    ``number`` names it in the worker's ``Response``s."""

    number: int
    id: str
    parameters: dict[str, Any]
    rows: int


@dataclass(frozen=True, slots=True)
class RunBatch:
    """Run one batch. ``requests`` (a Python model's) says who asked for which rows; a
    batch without them is one request (an isolated model's). ``number`` is the batch's
    number on the cancel board (``cancel.py``)."""

    inputs: list[Header]
    outputs: list[str]
    requests: tuple[RequestInfo, ...] = ()
    number: int = 0


@dataclass(frozen=True, slots=True)
class CallAnswers:
    """One answer per call of a ``Calls``, in order: its outputs' headers or why it
    failed."""

    answers: list[list[Header] | Failure]


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The call's number, for the messages that follow. A call that cannot start is opened
    too: its one response is the error."""

    stream: int


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One response of a streamed call: its outputs (None: a response without any, as
    Triton's empty final one), or an error; ``final`` for the last."""

    outputs: list[Header] | None
    error: Failure | None
    final: bool


@dataclass(frozen=True, slots=True)
class Sent:
    """The response was queued for its client; ``alive``: the client is still there."""

    alive: bool


@dataclass(frozen=True, slots=True)
class Stop:
    pass


# -- worker -> server ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class LoadFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A request of the batch the model answered with an error (by its index)."""

    index: int
    failure: Failure


@dataclass(frozen=True, slots=True)
class BatchDone:
    """The batch ran: the outputs of the requests that did not fail (their rows in order)
    and those that did."""

    outputs: list[Header]
    failed: tuple[RequestFailed, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchFailed:
    """The whole batch failed."""

    failure: Failure


@dataclass(frozen=True, slots=True)
class Call:
    """One call to another served model; ``timeout`` (seconds) bounds it."""

    model: str
    version: str
    inputs: list[Header]
    outputs: list[str]
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Calls:
    """Calls to run at once (an async handler's gathered ``async_exec``: several)."""

    calls: list[Call]


@dataclass(frozen=True, slots=True)
class StreamOpen:
    """Call a model and stream its responses; the call's inputs are in the arena."""

    call: Call


@dataclass(frozen=True, slots=True)
class StreamNext:
    """The next response of a streamed call."""

    stream: int


@dataclass(frozen=True, slots=True)
class StreamCancel:
    """Stop a streamed call (no answer: the next ``StreamNext`` gets its final, stopped
    response)."""

    stream: int


@dataclass(frozen=True, slots=True)
class Response:
    """A decoupled model's response to request ``request`` (its ``RequestInfo.number``):
    outputs (None: none), or an error; ``final`` for its last."""

    request: int
    outputs: list[Header] | None
    final: bool
    error: Failure | None = None


@dataclass(frozen=True, slots=True)
class MetricUpdates:
    """Custom metric changes (``inferplex.handler.metrics.drain``'s records)."""

    updates: list[tuple[Any, ...]] = field(default_factory=list)


#: what a worker sends about its streamed calls
StreamRequest = StreamOpen | StreamNext | StreamCancel
#: what a worker sends while a batch runs, before its answer
BatchRequest = Calls | StreamRequest | Response
#: what a worker answers a batch with
BatchAnswer = BatchDone | BatchFailed
