"""What a protocol plugs into the data plane: a :class:`Codec` (one answer per call) or a
:class:`StreamCodec` (the responses as the model sends them), and the :class:`CallMeta` of
each call.

A frontend maps its transport to ``(body, meta)`` and hands them, with its codec, to
``DataPlane.infer`` or ``DataPlane.stream``; what it gets back is the codec's own answer,
which it maps back to its transport. Everything in between is the data plane's, once for
every protocol: the offload of a large decode or encode to a worker thread (by the codec's
:meth:`Codec.work` and the response's size), the byte-budget charge of a large decode,
admission (limits), the routing key, the engine call (the model's circuit breaker and
timeout are the engine's), the call's deadline, its tracing span, classification and the
encoding. A codec only translates, and may be called on the event loop or in a worker
thread.

Writing a codec (REST, gRPC ModelInfer and ModelStreamInfer, Triton's generate and the
OpenAI-compatible API are all codecs; see ``protocol/v2/codecs.py``)::

    class MyCodec:                                   # a Codec[MyAnswer]
        def span(self, meta) -> SpanLabel: ...       # the call's server span, if traced
        def work(self, body, meta) -> int: ...       # bytes of decoding work: past
                                                     # OFFLOAD_BYTES, decode runs in a thread
        def decode(self, body, meta, regions, checks) -> InferenceRequest: ...
        def encode(self, response, request, meta) -> MyAnswer: ...

    class MyStreamCodec:                             # a StreamCodec[Head, Item]: span,
                                                     # work and decode as above, and
        def encoder(self, request, meta) -> ItemEncoder[Head, Item]: ...

``decode`` raises an :class:`~inferplex.errors.InferplexError` naming the field for bad
input; it reads a shared-memory input through ``regions`` (None: the caller has none) and
runs the checks ``checks(model, version)`` gives (when not None: off the loop, before a
large tensor is decoded) on each input's declared name, datatype and shape; on the event
loop (``checks`` None) it may raise ``ReadOffLoop`` to be decoded in a worker thread instead
(a large tensor in shared memory; files to read, as the OpenAI codecs' tokenizer). The answer
types are the codec's: the REST codec answers an :data:`HttpReply` ``(status, body,
headers)``, gRPC's the message bytes, so a codec makes its own HTTP status and headers.

A stream's encoder is made per request (it may keep state: a chunk counter, the text so
far). ``head(first)`` sees the first response (or error) before anything is sent and answers
what precedes the items (an HTTP codec: its status and headers, an :class:`HttpHead`), or
raises to refuse the call (an error before the first event is the call's answer: a JSON
error with its status); then
``item`` encodes each response or error the model sends (None: nothing to send for it, e.g. a
bare final flag), and ``end`` what closes the stream (None: nothing; a server-sent-events
codec: ``data: [DONE]``; one that answers once: the whole answer). Server-sent events are
items of ``b"data: ...\\n\\n"``; the HTTP frontend sends the items as they come.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from inferplex.core.streaming import StreamedResponse
from inferplex.dataplane.checks import CheckFactory
from inferplex.errors import ErrorCode
from inferplex.shm.registry import Regions
from inferplex.tracing.context import CallTrace
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = [
    "Body",
    "CallMeta",
    "Codec",
    "Decoder",
    "Headers",
    "HttpHead",
    "HttpReply",
    "ItemEncoder",
    "SpanLabel",
    "StreamCodec",
]

#: a call's body as the transport read it: bytes for a wire protocol (a large body: a view
#: of the buffer it was read into); the in-process API's is the request itself
Body = Any

Answer = TypeVar("Answer", covariant=True)
Head = TypeVar("Head", covariant=True)
Item = TypeVar("Item", covariant=True)


#: HTTP header fields as (lower-case name, value) pairs
Headers = list[tuple[bytes, bytes]]


@dataclass(slots=True)
class CallMeta:
    """What a call brings besides its body, as its frontend read it from the transport."""

    #: the model and version the call names outside its body (a URL's; "" where the body
    #: names them, as a gRPC message does)
    model: str = ""
    version: str = ""
    #: the caller's shared-memory regions (None: it may name none)
    regions: Regions | None = None
    #: the routing header's (or gRPC metadata key's) value: the request parameter
    #: ``routing_key`` unless the body sets one (sticky routes, docs/routing.md)
    routing_key: str | None = None
    #: the event loop's time (``loop.time()``) by which the call must be answered
    #: (gRPC's ``grpc-timeout``); past it the model is told and the call ends with
    #: DeadlineExceededError
    deadline: float | None = None
    #: the REST binary extension's Inference-Header-Content-Length (None: all JSON)
    header_length: int | None = None
    #: the trace the call continues (set only while tracing is on)
    trace: CallTrace | None = None
    #: the call's request headers (HTTP), for a codec that reads one of its own (None: the
    #: frontend passes none, as for gRPC, whose codecs read only the message)
    headers: Headers | None = None


#: what an HTTP codec answers a call with: status, body, headers (no content-length)
HttpReply = tuple[int, bytes, Headers]


@dataclass(frozen=True, slots=True)
class HttpHead:
    """What an HTTP stream codec's ``head`` answers: the status and headers, and whether
    the items are one whole body (``whole``: joined and sent with a content-length, as
    ``/generate`` answers) or sent as they come (server-sent events)."""

    status: int
    headers: Headers
    whole: bool = False


@dataclass(frozen=True, slots=True)
class SpanLabel:
    """How a codec's calls appear in traces: the server span's name and attributes, and the
    attribute that records the call's status (``status(None)`` when it succeeded, else
    ``status(code)`` of the error it ended with)."""

    name: str
    attributes: dict[str, Any]
    status_key: str
    status: Callable[[ErrorCode | None], int]


class Decoder(Protocol):
    """What every codec does: the call's span, and its body decoded (module docstring)."""

    def span(self, meta: CallMeta) -> SpanLabel:
        """The call's server span (asked only while tracing is on)."""
        ...

    def work(self, body: Body, meta: CallMeta) -> int:
        """Bytes of work decoding ``body`` takes: past ``OFFLOAD_BYTES``, ``decode`` runs in
        a worker thread with ``checks``; at most that, on the event loop without them."""
        ...

    def decode(
        self, body: Body, meta: CallMeta, regions: Regions | None, checks: CheckFactory | None
    ) -> InferenceRequest:
        """The request in ``body``; InferplexError naming what is wrong with it."""
        ...


class Codec(Decoder, Protocol[Answer]):
    """A protocol's translation of a call answered once."""

    def encode(
        self, response: InferenceResponse, request: InferenceRequest, meta: CallMeta
    ) -> Answer:
        """The answer to ``request``: ``response`` on the wire."""
        ...


class ItemEncoder(Protocol[Head, Item]):
    """The encoding of one request's responses as its model sends them."""

    def head(self, first: StreamedResponse) -> Head:
        """What precedes the items, given the first response or error; raises an
        InferplexError to refuse the call instead (nothing has been sent)."""
        ...

    def item(self, item: StreamedResponse) -> Item | None:
        """One response (or the model's error) on the wire; None: nothing to send."""
        ...

    def end(self) -> Item | None:
        """What closes the stream after its final response; None: nothing."""
        ...


class StreamCodec(Decoder, Protocol[Head, Item]):
    """A codec whose calls are answered by the responses as the model sends them."""

    def encoder(self, request: InferenceRequest, meta: CallMeta) -> ItemEncoder[Head, Item]:
        """The encoder of ``request``'s responses."""
        ...
