"""Every message between the server and a worker process (``worker_process.py`` on the
server's side, ``backends/python/worker.py`` in the worker), as typed named tuples: each
receiver has one ``match`` over the classes it can get, and an error always travels as a
``Failure`` (an ``ErrorCode`` and its message, in that order). vLLM v1's ``EngineCoreRequest``
and Triton python_backend's ``ipc_message.h`` are the same idea.

Messages carry small things only. Tensors never do: their bytes are in the worker's
shared-memory arena (``arena.py``) and a message carries their ``Header``s. On the socket
(``multiprocessing.connection`` framing, ``Wire``) a message travels as a plain tuple, its
class's number and its fields, a nested message as its fields alone (``pack`` / ``unpack``),
pickled with ``pickle.dumps`` (``Connection.send``'s ``ForkingPickler`` copies its dispatch
table for every message, 2 µs; nothing here needs its reducers).

Why named tuples (``bench/worker_messages.py`` measures it): a small request makes a
``RunBatch`` with one ``RequestInfo`` and a ``BatchDone``, and their cost is a part of the
request's. A named tuple is built by one C call from its wire tuple and packed by one tuple
concatenation; its fields are read by C descriptors; it is immutable. Frozen dataclasses
cost 11 µs more per request than the string-tagged tuples the protocol had before
(unpacking a ``RunBatch`` alone about 5 µs); these cost 2.5 µs less than the tuples. What a
tuple brings along, ``message`` takes away where it matters: two messages are equal only
when of the same class (``Stop() == Ready()`` is not true); a message with no fields is an
empty tuple all the same, so receivers ``match`` on the class, never on a message's truth
value.

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

import functools
import os
import pickle
import struct
import threading
import types
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

from inferplex.backends.worker.arena import Header
from inferplex.errors import ErrorCode, InferplexError

T = TypeVar("T")

#: a message's fields as a plain tuple (its nested messages too), and back
Encode = Callable[[Any], tuple[Any, ...]]
Decode = Callable[[tuple[Any, ...]], Any]

#: per class: its packer (its number on the wire, then its fields)
_PACK: dict[type, Encode] = {}
#: by number: the decoder of the class
_UNPACK: list[Decode] = []
#: per class: its fields as a plain tuple and back, for a message nested in another
_FIELDS: dict[type, tuple[Encode, Decode]] = {}


def message(cls: type[T]) -> type[T]:
    """A named tuple numbered for the wire, equal only to messages of its class. A field
    whose type is a message class (or one of them or None, or a ``tuple[Message, ...]``)
    travels as that message's fields."""
    packer, encode, decode = _codec(cls, len(_UNPACK))
    _PACK[cls] = packer
    _UNPACK.append(decode)
    _FIELDS[cls] = (encode, decode)
    cls.__eq__ = _equal  # type: ignore[assignment,method-assign]
    cls.__ne__ = _unequal  # type: ignore[assignment,method-assign]
    cls.__hash__ = tuple.__hash__  # type: ignore[assignment,method-assign]
    return cls


def _equal(self: tuple[Any, ...], other: object) -> bool:
    return type(other) is type(self) and tuple.__eq__(self, other)


def _unequal(self: tuple[Any, ...], other: object) -> bool:
    return not _equal(self, other)


def _nested(hint: Any) -> tuple[type, bool] | None:
    """The message class a field's type holds, and whether many of them; None: none."""
    if hint in _FIELDS:
        return hint, False
    origin, args = get_origin(hint), get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _FIELDS:
        return args[0], True
    if origin in (Union, types.UnionType):
        inner = [arg for arg in args if arg in _FIELDS]
        if len(inner) == 1 and len(args) == 2 and type(None) in args:
            return inner[0], False
    return None


def _codec(cls: type, number: int) -> tuple[Encode, Encode, Decode]:
    """The class's packer (its number, then its fields), encoder (its fields, for a message
    nested in another) and decoder, as few Python calls as can be: a message without nested
    ones is packed and made by one C call each; one with them by functions written for its
    fields (a general loop over them cost twice as much: 0.6 µs to pack an empty
    ``BatchDone``)."""
    make: Decode = functools.partial(tuple.__new__, cls)
    hints = get_type_hints(cls)
    names: dict[str, Any] = {"make": make}
    encoded, decoded = [], []
    for index, name in enumerate(cls._fields):  # type: ignore[attr-defined]
        value, wire = f"v[{index}]", f"w[{index}]"
        found = _nested(hints[name])
        if found is not None:
            inner, many = found
            names[f"e{index}"], names[f"d{index}"] = _FIELDS[inner]
            if many:
                value, wire = f"tuple(map(e{index}, {value}))", f"tuple(map(d{index}, {wire}))"
            else:
                value = f"None if {value} is None else e{index}({value})"
                wire = f"None if {wire} is None else d{index}({wire})"
        encoded.append(value)
        decoded.append(wire)
    if len(names) == 1:
        return functools.partial(tuple.__add__, (number,)), tuple, make
    fields = ", ".join(encoded)
    source = (
        f"def pack(v): return ({number}, {fields})\n"
        f"def encode(v): return ({fields},)\n"
        f"def decode(w): return make(({', '.join(decoded)},))\n"
    )
    exec(source, names)  # made of the class's number and its fields' indexes
    return names["pack"], names["encode"], names["decode"]


def pack(value: Any) -> tuple[Any, ...]:
    """A message as a plain tuple: its class's number, then its fields."""
    return _PACK[type(value)](value)


def unpack(wire: tuple[Any, ...]) -> Any:
    """The message ``pack`` made ``wire`` of."""
    return _UNPACK[wire[0]](wire[1:])


class Wire:
    """A connection that carries messages (packed); several threads may send.

    The frames are ``multiprocessing.connection``'s (a 4-byte big-endian length, then the
    pickle), written here with one ``os.write`` and read with two ``os.read`` (length, then
    pickle): ``Connection``'s own ``send_bytes`` and ``recv`` add four Python calls and a
    ``BytesIO`` a message, 2 µs of a small request's round trip. The ``Connection`` still
    polls and closes."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._fd = connection.fileno()
        self._lock = threading.Lock()

    def send(self, value: Any) -> None:
        data = pickle.dumps(_PACK[type(value)](value), pickle.HIGHEST_PROTOCOL)  # pack
        if len(data) > _LARGEST:
            raise ValueError(f"a {type(value).__name__} of {len(data)} bytes is too large to send")
        with self._lock:
            _write(self._fd, _LENGTH.pack(len(data)) + data)

    def recv(self) -> Any:
        (size,) = _LENGTH.unpack(_read(self._fd, 4))
        wire = pickle.loads(_read(self._fd, size))
        return _UNPACK[wire[0]](wire[1:])  # unpack

    def poll(self, timeout: float) -> bool:
        return self.connection.poll(timeout)

    def close(self) -> None:
        self._fd = -1  # a thread still reading gets EBADF, not another file's bytes
        self.connection.close()


#: a frame's length, as ``multiprocessing.connection`` writes it (up to 2 GiB - 1)
_LENGTH = struct.Struct("!i")
_LARGEST = 0x7FFFFFFF


def _write(fd: int, data: bytes) -> None:
    sent = os.write(fd, data)
    while sent < len(data):  # a large message goes in parts
        sent += os.write(fd, memoryview(data)[sent:])


def _read(fd: int, size: int) -> bytes:
    """``size`` bytes; EOFError when the other end closed first."""
    data = os.read(fd, size)
    if len(data) == size:
        return data
    parts, left = [data], size - len(data)
    while left:
        if not parts[-1]:
            raise EOFError
        parts.append(os.read(fd, left))
        left -= len(parts[-1])
    return b"".join(parts)


@message
class Failure(NamedTuple):
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
class Init(NamedTuple):
    """What the worker loads: a handler's settings, or (``"loader"``) an isolated model's."""

    settings: dict[str, Any]


@message
class RequestInfo(NamedTuple):
    """One client request of a batch: its id, parameters and rows of the batch (in order).
    ``number`` names it in the worker's ``Response``s."""

    number: int
    id: str
    parameters: dict[str, Any]
    rows: int


@message
class RunBatch(NamedTuple):
    """Run one batch. ``requests`` (a Python model's) says who asked for which rows; a
    batch without them is one request (an isolated model's). ``number`` is the batch's
    number on the cancel board (``cancel.py``)."""

    inputs: list[Header]
    outputs: list[str]
    requests: tuple[RequestInfo, ...] = ()
    number: int = 0


@message
class CallAnswer(NamedTuple):
    """The answer to one call: its outputs' headers, or why it failed."""

    outputs: list[Header] | None
    error: Failure | None = None


@message
class CallAnswers(NamedTuple):
    """One answer per call of a ``Calls``, in order."""

    answers: tuple[CallAnswer, ...]


@message
class StreamOpened(NamedTuple):
    """The call's number, for the messages that follow. A call that cannot start is opened
    too: its one response is the error."""

    stream: int


@message
class StreamItem(NamedTuple):
    """One response of a streamed call: its outputs (None: a response without any, as
    Triton's empty final one), or an error; ``final`` for the last."""

    outputs: list[Header] | None
    error: Failure | None
    final: bool


@message
class Sent(NamedTuple):
    """The response was queued for its client; ``alive``: the client is still there."""

    alive: bool


@message
class Stop(NamedTuple):
    pass


# -- worker -> server ---------------------------------------------------------------------
@message
class Ready(NamedTuple):
    pass


@message
class LoadFailed(NamedTuple):
    reason: str


@message
class RequestFailed(NamedTuple):
    """A request of the batch the model answered with an error (by its position in the
    batch's ``requests``)."""

    position: int
    failure: Failure


@message
class BatchDone(NamedTuple):
    """The batch ran: the outputs of the requests that did not fail (their rows in order)
    and those that did. ``open``: a decoupled model's requests (``RequestInfo.number``)
    whose final response is still to come, from threads the model started (the next batch
    may run meanwhile)."""

    outputs: list[Header]
    failed: tuple[RequestFailed, ...] = ()
    open: tuple[int, ...] = ()


@message
class BatchFailed(NamedTuple):
    """The whole batch failed."""

    failure: Failure


@message
class Call(NamedTuple):
    """One call to another served model; ``timeout`` (seconds) bounds it."""

    model: str
    version: str
    inputs: list[Header]
    outputs: list[str]
    timeout: float | None


@message
class Calls(NamedTuple):
    """Calls to run at once (an async handler's gathered ``async_exec``: several)."""

    calls: tuple[Call, ...]


@message
class StreamOpen(NamedTuple):
    """Call a model and stream its responses; the call's inputs are in the arena."""

    call: Call


@message
class StreamNext(NamedTuple):
    """The next response of a streamed call."""

    stream: int


@message
class StreamCancel(NamedTuple):
    """Stop a streamed call (no answer: the next ``StreamNext`` gets its final, stopped
    response)."""

    stream: int


@message
class Response(NamedTuple):
    """A decoupled model's response to request ``request`` (its ``RequestInfo.number``):
    outputs (None: none), or an error; ``final`` for its last."""

    request: int
    outputs: list[Header] | None
    final: bool
    error: Failure | None = None


@message
class MetricUpdates(NamedTuple):
    """Custom metric changes (``inferplex.handler.metrics.drain``'s records)."""

    updates: list[tuple[Any, ...]]


#: what a worker sends about its streamed calls
StreamRequest = StreamOpen | StreamNext | StreamCancel
#: what a worker sends while a batch runs, before its answer
BatchRequest = Calls | StreamRequest | Response
#: what a worker answers a batch with
BatchAnswer = BatchDone | BatchFailed
