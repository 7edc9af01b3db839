"""The data plane: the one door between the protocols and the engine (MLServer's
``DataPlane``). Every inference call, whatever its protocol, is one
``DataPlane.infer(codec, body, meta)`` or ``DataPlane.stream(codec, body, meta)``; the codec
translates (``dataplane/codec.py``), the data plane decides, once:

- where the body is decoded: on the event loop when the codec's ``work`` is small, else in
  a worker thread, with what its decoding allocates charged to the server's byte budget
  until the call ends (``security/charges.py``), and each input's declared name, datatype
  and shape checked before its data is decoded (the limits, then the model's);
- admission: the request limits (:class:`RequestLimits`) on the decoded request;
- the routing key: the configured HTTP header, or the gRPC metadata key of the same name,
  becomes the request parameter ``routing_key`` (:meth:`DataPlane.route`);
- the engine call (``engine.infer`` / ``engine.stream``: routes, and each model's circuit
  breaker and timeout, which guard a model for every caller, BLS and routes too);
- the call's deadline (``CallMeta.deadline``): past it the model is told (the request is
  cancelled) and the call ends with DeadlineExceededError;
- the call's tracing span (``tracing/calls.py``), while tracing is on;
- classification: an output asked for as its top N classes is answered so, as Triton does,
  for every protocol, streams included (``dataplane/classes.py``);
- where the answer is encoded: on the loop when small, else in a worker thread.

The checks of each tensor are ``dataplane/checks.py``'s, called by the codecs where they
meet each tensor (the hot path makes no second pass); the in-process API (``Server.infer``,
``Server.stream``) goes through the same door with a codec whose body is the request itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from inferplex.core.streaming import Responses, StreamedResponse
from inferplex.dataplane.checks import CheckFactory, declared_checks
from inferplex.dataplane.classes import Classes, Folders
from inferplex.dataplane.classification import ClassifiedOutputs
from inferplex.dataplane.codec import Body, CallMeta, Codec, SpanLabel, StreamCodec
from inferplex.dataplane.local import LOCAL, LOCAL_STREAM
from inferplex.dataplane.offload import OFFLOAD_BYTES, small_response
from inferplex.dataplane.spans import TracedCall
from inferplex.dataplane.streams import Failed, Streamed, deadline_error
from inferplex.errors import InferplexError
from inferplex.routing.config import DEFAULT_STICKY_PARAMETER as ROUTING_KEY
from inferplex.security.charges import Budget, Charge, charging
from inferplex.security.limits import RequestLimits
from inferplex.shm.registry import ReadOffLoop, SharedMemoryRegistry
from inferplex.tracing.context import CallTracer
from inferplex.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferplex.config.model_config import ModelConfig
    from inferplex.config.server_config import ServerConfig
    from inferplex.core.validation import RequestValidator

__all__ = ["OFFLOAD_BYTES", "ROUTING_KEY", "DataPlane", "Engine", "small_response"]

A = TypeVar("A")
H = TypeVar("H")
I = TypeVar("I")  # noqa: E741 (an item)


class Engine(Protocol):
    """What the data plane needs of the engine."""

    @property
    def shared_memory(self) -> SharedMemoryRegistry | None: ...

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None: ...

    def infer(self, request: InferenceRequest) -> Awaitable[InferenceResponse]: ...

    def stream(self, request: InferenceRequest) -> Awaitable[Responses]: ...

    def model_config(self, name: str, version: str = "") -> ModelConfig: ...


class DataPlane:
    """Every protocol's calls on their way to the engine and back (module docstring). Built
    once by the composition root and shared by the frontends (a frontend built alone makes
    its own)."""

    __slots__ = (
        "_admit",
        "_call",
        "_folders",
        "budget",
        "checks",
        "classes",
        "engine",
        "limits",
        "routing_header",
        "routing_metadata",
        "tracer",
    )

    def __init__(
        self,
        engine: Engine,
        limits: RequestLimits,
        routing_header: str = "",
        folders: Folders | None = None,
        budget: Budget | None = None,
    ) -> None:
        """``routing_header``: the HTTP header (and gRPC metadata key) whose value becomes
        the request parameter ``routing_key``; empty for none. ``folders``: where a model's
        label files are (without it, classes come without labels). ``budget``: the
        server-wide byte budget large requests' decoding is charged to (None: not charged)."""
        self.engine = engine
        self.budget = budget
        self.limits = limits
        self._admit = limits.check
        self._call = engine.infer  # bound once: one attribute less per call
        #: per input, what runs on its declared name, datatype and shape before a large
        #: tensor is decoded: the limits, then the model's checks
        self.checks: CheckFactory = declared_checks(limits, engine)
        self.classes = Classes(engine, folders)
        self._folders = folders
        #: opens the calls' server spans while tracing is on (the composition root sets it)
        self.tracer: CallTracer | None = None
        key = routing_header.strip().lower()
        self.routing_header = key.encode("latin-1")  # HTTP header names arrive lower-case
        self.routing_metadata = key  # so do gRPC metadata keys

    @classmethod
    def from_config(
        cls,
        engine: Engine,
        config: ServerConfig,
        folders: Folders | None = None,
        budget: Budget | None = None,
    ) -> DataPlane:
        limits = RequestLimits(config.max_tensor_elements, config.max_string_bytes)
        return cls(engine, limits, config.routing_header, folders, budget)

    # -- the calls ------------------------------------------------------------------------
    def infer(self, codec: Codec[A], body: Body, meta: CallMeta) -> Coroutine[Any, Any, A]:
        """The answer to one call: ``body`` decoded by ``codec``, admitted, routed, served
        by the engine, classified where asked, encoded by ``codec``. InferplexError for a
        call refused or failed (its frontend answers it with the error's status)."""
        if meta.deadline is None and meta.trace is None:
            return self._infer(codec, body, meta)  # the hot path: one coroutine, no wrapper
        return self._infer_bounded(codec, body, meta)

    async def stream(self, codec: StreamCodec[H, I], body: Body, meta: CallMeta) -> Streamed[H, I]:
        """The responses to one call as its model sends them, each encoded by ``codec``'s
        encoder: ``head`` (given the first) is ready when this returns, then the items
        (``async for``). The caller ``close``s it if it stops before the end. A call whose
        body is refused raises here; an engine's refusal of the decoded request is the first
        response (an error that knows its request), for the codec to answer."""
        traced = self._open_span(codec, meta)
        charge = None
        try:
            request = self._decoded_here(codec, body, meta)
            if request is None:
                charge = self.charge()
                request = await asyncio.to_thread(self._decode, codec, body, meta, charge)
            if meta.routing_key is not None:
                self.route(request, meta.routing_key)
            encoder = codec.encoder(request, meta)
            try:
                responses: Responses = await self.engine.stream(request)
            except InferplexError as exc:
                responses = Failed(exc)
        except BaseException as exc:
            if charge is not None:
                charge.release()
            if traced is not None:
                traced.end(exc)
            raise
        streamed = Streamed(
            self.classes, request, responses, encoder, charge, traced, meta.deadline
        )
        try:
            await streamed.open()
        finally:
            if traced is not None:
                traced.detach()
        return streamed

    def infer_local(self, request: InferenceRequest) -> Coroutine[Any, Any, InferenceResponse]:
        """The in-process API's way in (``Server.infer``): a request built in Python goes
        through the same door, each tensor checked as a codec checks a decoded one."""
        return self.infer(LOCAL, request, CallMeta(regions=self._anonymous_regions()))

    async def stream_local(self, request: InferenceRequest) -> Streamed[None, StreamedResponse]:
        """``infer_local`` for the responses as the model sends them (``Server.stream``)."""
        return await self.stream(LOCAL_STREAM, request, CallMeta(regions=self._anonymous_regions()))

    # -- what a call goes through --------------------------------------------------------
    def charge(self) -> Charge | None:
        """A new charge for a large request's decoding (None when nothing is charged);
        its owner releases it when the request ends."""
        return None if self.budget is None else Charge(self.budget)

    def folder(self, model: str) -> Path | None:
        """The folder of a model's files (its tokenizer and chat template, for the OpenAI
        API), if known."""
        return self._folders(model) if self._folders is not None else None

    def route(self, request: InferenceRequest, routing_key: str) -> None:
        """``routing_key``, the value of the routing header (or gRPC metadata key), becomes
        the request parameter ``routing_key`` unless the request has one: a parameter the
        client wrote in the body wins. A new parameter dict: the decoded one may be shared
        with a codec's layout cache."""
        if ROUTING_KEY not in request.parameters:
            request.parameters = {**request.parameters, ROUTING_KEY: routing_key}

    def routing_value(self, metadata: list[tuple[str, str | bytes]]) -> str | None:
        """The routing key in a gRPC call's metadata, if the call has one."""
        key = self.routing_metadata
        if not key:
            return None
        for name, value in metadata:
            if name == key:
                return value if isinstance(value, str) else value.decode("utf-8", "replace")
        return None

    async def classify(
        self, request: InferenceRequest, response: InferenceResponse
    ) -> InferenceResponse:
        """``response`` with the outputs ``request`` asked classes of as their classes."""
        return await self.classes.classify(request, response)

    async def _infer(self, codec: Codec[A], body: Body, meta: CallMeta) -> A:
        charge = request = None
        if codec.work(body, meta) <= OFFLOAD_BYTES:  # _decoded_here, inline: the hot path
            regions = meta.regions
            try:
                request = codec.decode(
                    body, meta, None if regions is None else regions.on_loop, None
                )
            except ReadOffLoop:  # a large tensor in shared memory: read in a worker thread
                pass
            else:
                self._admit(request)
        try:
            if request is None:
                charge = self.charge()
                request = await asyncio.to_thread(self._decode, codec, body, meta, charge)
            if meta.routing_key is not None:
                self.route(request, meta.routing_key)
            response = await self._call(request)
            if type(request.outputs) is ClassifiedOutputs:  # the type says it: no pass over them
                response = await self.classes.classify(request, response)
            if small_response(response):
                return codec.encode(response, request, meta)
            return await asyncio.to_thread(codec.encode, response, request, meta)
        finally:
            if charge is not None:  # answered: its decoding leaves the budget
                charge.release()

    async def _infer_bounded(self, codec: Codec[A], body: Body, meta: CallMeta) -> A:
        """``_infer`` within the call's deadline and span."""
        traced = self._open_span(codec, meta)
        try:
            if meta.deadline is None:
                answer = await self._infer(codec, body, meta)
            else:
                try:
                    async with asyncio.timeout_at(meta.deadline):
                        answer = await self._infer(codec, body, meta)
                except TimeoutError:  # the call was cancelled where it was: the model told
                    raise deadline_error(meta.model) from None
        except BaseException as exc:
            if traced is not None:
                traced.end(exc)
            raise
        if traced is not None:
            traced.end(None)
        return answer

    def _decoded_here(self, codec: Any, body: Body, meta: CallMeta) -> InferenceRequest | None:
        """The request of a body that is little work, decoded and admitted on the event
        loop; None for one to decode in a worker thread (large, or naming a large tensor in
        shared memory). The hot path: a plain call, no coroutine."""
        if codec.work(body, meta) > OFFLOAD_BYTES:
            return None
        regions = meta.regions
        try:
            request: InferenceRequest = codec.decode(
                body, meta, None if regions is None else regions.on_loop, None
            )
        except ReadOffLoop:  # a large tensor in shared memory: read it in a worker thread
            return None
        self._admit(request)
        return request

    def _decode(
        self, codec: Any, body: Body, meta: CallMeta, charge: Charge | None
    ) -> InferenceRequest:
        """In a worker thread: the request decoded, each input's declared name, datatype
        and shape checked before its data is, its allocations charged to ``charge``."""
        charging(charge)  # this thread's context is a copy: only this decode is charged
        request: InferenceRequest = codec.decode(body, meta, meta.regions, self.checks)
        self._admit(request)
        return request

    def _open_span(self, codec: Any, meta: CallMeta) -> TracedCall | None:
        trace = meta.trace
        if trace is None or self.tracer is None:
            return None
        label: SpanLabel = codec.span(meta)
        span = self.tracer.start(label.name, label.attributes, trace)
        return None if span is None else TracedCall(span, label)

    def _anonymous_regions(self) -> Any:
        # a request built in Python comes with no token: the anonymous principal's regions
        registry = self.engine.shared_memory
        return None if registry is None else registry.owned_by(None)
