"""The messages of a streamed call between a worker and the server: a handler calling a
decoupled model (Triton's ``exec(decoupled=True)``) reads its responses as they come.

Typed messages rather than tagged tuples, so each side matches on a class and its fields
have names. The worker pulls: it asks for one response at a time (``StreamNext``), so a
handler that reads slowly holds the called model back through the server's bounded response
channel (``--stream-queue-responses``) instead of piling responses up in either process.

  worker -> server  StreamOpen      start the call (its inputs in the arena)  -> StreamOpened
                    StreamNext      the call's next response                  -> StreamItem
                    StreamCancel    stop the call (no answer: the next StreamNext gets the
                                    final, cancelled response)

Tensors stay in the arena: a ``StreamItem`` carries their headers, written from the running
batch's free offset, and the worker copies them out before it sends anything else.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplex.backends.worker.arena import Header

#: the code of the response a cancelled call ends with (Triton's TritonError.CANCELLED)
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class StreamOpen:
    """Call ``model`` and stream its responses; ``timeout`` (seconds) bounds the whole call."""

    model: str
    version: str
    inputs: list[Header]
    outputs: list[str]
    timeout: float | None


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The call's number, for the messages that follow. A call that cannot start is opened
    too: its one response is the error."""

    stream: int


@dataclass(frozen=True, slots=True)
class StreamNext:
    stream: int


@dataclass(frozen=True, slots=True)
class StreamCancel:
    stream: int


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One response: its outputs (None: a response without any, as Triton's empty final
    one), or an error as (code, message); ``final`` for the last."""

    outputs: list[Header] | None
    error: tuple[str, str] | None
    final: bool


#: what a worker sends about its streamed calls
StreamRequest = StreamOpen | StreamNext | StreamCancel
