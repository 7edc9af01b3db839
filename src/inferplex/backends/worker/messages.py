"""Every message between the server and a worker process (``worker_process.py`` on the
server's side, ``backends/python/worker.py`` in the worker), as frozen dataclasses: each
receiver has one ``match`` over the classes it can get, and an error always travels as a
``Failure`` (an ``ErrorCode`` and its message, in that order). vLLM v1's ``EngineCoreRequest``
and Triton python_backend's ``ipc_message.h`` are the same idea.

Messages carry small things only. Tensors never do: their bytes are in the worker's
shared-memory arena (``arena.py``) and a message carries their ``Header``s. On the socket
(``multiprocessing.connection`` framing, ``Wire``) a message travels as a plain tuple, its
class's number and its fields (``pack`` / ``unpack``): pickling the dataclasses themselves
cost 12-30 µs more per round trip (a Python-level reduce and a frozen ``__init__`` per
message), a tenth of a small request's whole cost; the tuple costs about 2 µs more than the
tagged tuples the protocol had before.

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

import threading
from dataclasses import MISSING, Field, dataclass, field, fields
from multiprocessing.connection import Connection
from typing import Any, TypeVar, dataclass_transform

from inferplex.backends.worker.arena import Header
from inferplex.errors import ErrorCode, InferplexError

T = TypeVar("T")

#: every message class, by its number on the wire
_CLASSES: list[type] = []
#: per class: its field names, and the fields that hold messages (index, one or many)
_NAMES: dict[type, tuple[str, ...]] = {}
_NESTED: dict[type, tuple[tuple[int, bool], ...]] = {}
#: by number: the class, its field names and its nested fields (one look-up per message)
_TABLE: list[tuple[type, tuple[str, ...], tuple[tuple[int, bool], ...]]] = []
#: a field's metadata key: the field holds one message (False) or a sequence of them (True)
NESTED = "nested"


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def message(cls: type[T]) -> type[T]:
    """A frozen dataclass numbered for the wire. Its fields that hold messages say so with
    ``field(metadata={NESTED: many})``."""
    made = dataclass(frozen=True)(cls)
    own = fields(made)  # type: ignore[arg-type]
    made.__init__ = _init(own)  # type: ignore[method-assign]
    _CLASSES.append(made)
    _NAMES[made] = tuple(f.name for f in own)
    _NESTED[made] = tuple(
        (index, f.metadata[NESTED]) for index, f in enumerate(own) if NESTED in f.metadata
    )
    made._number = len(_CLASSES) - 1  # type: ignore[attr-defined]
    _TABLE.append((made, _NAMES[made], _NESTED[made]))
    return made


def _init(own: tuple[Field[Any], ...]) -> Any:
    """An ``__init__`` that fills the instance's dict at once: a frozen dataclass's own sets
    each field through ``object.__setattr__``, three times slower (1.4 µs for four fields),
    and the server makes a few messages per request."""
    names: dict[str, Any] = {"MISSING": MISSING}
    params, lines = [], []
    for f in own:
        if f.default is not MISSING:
            names[f"default_{f.name}"] = f.default
            params.append(f"{f.name}=default_{f.name}")
        elif f.default_factory is not MISSING:
            names[f"factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            lines.append(f"    if {f.name} is MISSING: {f.name} = factory_{f.name}()")
        else:
            params.append(f.name)
    values = ", ".join(f"{f.name!r}: {f.name}" for f in own)
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(params)}):",
            *lines,
            f"    self.__dict__.update({{{values}}})",
        ]
    )
    exec(source, names)  # made of the class's own field names, as dataclasses' own code
    return names["__init__"]


def pack(value: Any) -> tuple[Any, ...]:
    """A message as a plain tuple: its class's number, then its fields."""
    nested = _NESTED[type(value)]
    if not nested:
        return (value._number, *value.__dict__.values())
    values = list(value.__dict__.values())  # a dataclass's: in field order
    for index, many in nested:
        inner = values[index]
        if inner:
            values[index] = tuple(map(pack, inner)) if many else pack(inner)
    return (value._number, *values)


def unpack(wire: tuple[Any, ...]) -> Any:
    """The message ``pack`` made ``wire`` of (without running the class's ``__init__``)."""
    cls, names, nested = _TABLE[wire[0]]
    made = object.__new__(cls)
    if not nested:
        made.__dict__.update(zip(names, wire[1:], strict=False))
        return made
    values = list(wire[1:])
    for index, many in nested:
        inner = values[index]
        if inner:
            values[index] = tuple(map(unpack, inner)) if many else unpack(inner)
    made.__dict__.update(zip(names, values, strict=False))
    return made


class Wire:
    """A connection that carries messages (packed); several threads may send."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._lock = threading.Lock()

    def send(self, value: Any) -> None:
        wire = pack(value)
        with self._lock:
            self.connection.send(wire)

    def recv(self) -> Any:
        return unpack(self.connection.recv())

    def poll(self, timeout: float) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self.connection.close()


@message
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
@message
class Init:
    """What the worker loads: a handler's settings, or (``"loader"``) an isolated model's."""

    settings: dict[str, Any]


@message
class RequestInfo:
    """One client request of a batch: its id, parameters and rows of the batch (in order).
    ``number`` names it in the worker's ``Response``s."""

    number: int
    id: str
    parameters: dict[str, Any]
    rows: int


@message
class RunBatch:
    """Run one batch. ``requests`` (a Python model's) says who asked for which rows; a
    batch without them is one request (an isolated model's). ``number`` is the batch's
    number on the cancel board (``cancel.py``)."""

    inputs: list[Header]
    outputs: list[str]
    requests: tuple[RequestInfo, ...] = field(default=(), metadata={NESTED: True})
    number: int = 0


@message
class CallAnswer:
    """The answer to one call: its outputs' headers, or why it failed."""

    outputs: list[Header] | None
    error: Failure | None = field(default=None, metadata={NESTED: False})


@message
class CallAnswers:
    """One answer per call of a ``Calls``, in order."""

    answers: tuple[CallAnswer, ...] = field(metadata={NESTED: True})


@message
class StreamOpened:
    """The call's number, for the messages that follow. A call that cannot start is opened
    too: its one response is the error."""

    stream: int


@message
class StreamItem:
    """One response of a streamed call: its outputs (None: a response without any, as
    Triton's empty final one), or an error; ``final`` for the last."""

    outputs: list[Header] | None
    error: Failure | None = field(metadata={NESTED: False})
    final: bool


@message
class Sent:
    """The response was queued for its client; ``alive``: the client is still there."""

    alive: bool


@message
class Stop:
    pass


# -- worker -> server ---------------------------------------------------------------------
@message
class Ready:
    pass


@message
class LoadFailed:
    reason: str


@message
class RequestFailed:
    """A request of the batch the model answered with an error (by its index)."""

    index: int
    failure: Failure = field(metadata={NESTED: False})


@message
class BatchDone:
    """The batch ran: the outputs of the requests that did not fail (their rows in order)
    and those that did. ``open``: a decoupled model's requests (``RequestInfo.number``)
    whose final response is still to come, from threads the model started (the next batch
    may run meanwhile)."""

    outputs: list[Header]
    failed: tuple[RequestFailed, ...] = field(default=(), metadata={NESTED: True})
    open: tuple[int, ...] = ()


@message
class BatchFailed:
    """The whole batch failed."""

    failure: Failure = field(metadata={NESTED: False})


@message
class Call:
    """One call to another served model; ``timeout`` (seconds) bounds it."""

    model: str
    version: str
    inputs: list[Header]
    outputs: list[str]
    timeout: float | None


@message
class Calls:
    """Calls to run at once (an async handler's gathered ``async_exec``: several)."""

    calls: tuple[Call, ...] = field(metadata={NESTED: True})


@message
class StreamOpen:
    """Call a model and stream its responses; the call's inputs are in the arena."""

    call: Call = field(metadata={NESTED: False})


@message
class StreamNext:
    """The next response of a streamed call."""

    stream: int


@message
class StreamCancel:
    """Stop a streamed call (no answer: the next ``StreamNext`` gets its final, stopped
    response)."""

    stream: int


@message
class Response:
    """A decoupled model's response to request ``request`` (its ``RequestInfo.number``):
    outputs (None: none), or an error; ``final`` for its last."""

    request: int
    outputs: list[Header] | None
    final: bool
    error: Failure | None = field(default=None, metadata={NESTED: False})


@message
class MetricUpdates:
    """Custom metric changes (``inferplex.handler.metrics.drain``'s records)."""

    updates: list[tuple[Any, ...]] = field(default_factory=list)


#: what a worker sends about its streamed calls
StreamRequest = StreamOpen | StreamNext | StreamCancel
#: what a worker sends while a batch runs, before its answer
BatchRequest = Calls | StreamRequest | Response
#: what a worker answers a batch with
BatchAnswer = BatchDone | BatchFailed
