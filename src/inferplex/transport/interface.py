"""What the frontends and the composition root see of a server, whichever serves: the
built-in ones or the reference twins."""

from __future__ import annotations

import socket
from collections.abc import AsyncGenerator, Callable, Coroutine, Mapping, Sized
from typing import TYPE_CHECKING, Any, Protocol

from inferplex.errors import InferplexError

if TYPE_CHECKING:
    from inferplex.transport.connections import ConnectionGate
    from inferplex.transport.http_limits import ByteBudget
    from inferplex.transport.listener import ListenerSpec

#: an ASGI 3 application (scope, receive, send)
AsgiApp = Callable[[Any, Any, Any], Coroutine[Any, Any, None]]
#: call metadata: keys lower-case, ``-bin`` values as bytes
Metadata = list[tuple[str, str | bytes]]
#: sees every call's method (path) and metadata first; raises InferplexError to refuse it,
#: or returns who makes the call (the call's ``identity``)
Guard = Callable[[str, Metadata], object]


class GrpcCall(Protocol):
    """What a method handler and the guard see of a call besides its message; ``identity``
    is what the guard returned (None without a guard)."""

    @property
    def method(self) -> str: ...

    @property
    def connection(self) -> object:
        """The connection carrying the call (hashable: per-connection bounds count by it)."""

    @property
    def identity(self) -> object: ...

    def metadata(self) -> Metadata: ...


class GrpcMethod(Protocol):
    """One RPC of a server's table (``transport.grpc_server.Method``): ``parse`` reads the
    request message (bytes-like), ``handler(request, call)`` answers it, ``serialize``
    writes the response; ``refused`` answers every call at once. A ``streaming`` method is
    a bidirectional stream: ``handler(requests, call)`` takes an async iterator of parsed
    messages and returns an async iterator of responses. A ``large`` method takes messages
    up to the server's message limit, any other up to the small one."""

    @property
    def handler(self) -> Callable[[Any, Any], Any]: ...

    @property
    def streaming(self) -> bool: ...

    @property
    def parse(self) -> Callable[[Any], Any]: ...

    @property
    def serialize(self) -> Callable[[Any], bytes]: ...

    @property
    def refused(self) -> InferplexError | None: ...

    @property
    def large(self) -> bool: ...


class GrpcServing(Protocol):
    """A gRPC server of a method table: serves on a bound socket, stops with a grace;
    ``counters`` are its transport's (connections, buffered bytes, limits exceeded)."""

    @property
    def counters(self) -> Any: ...

    async def start(self, sock: socket.socket) -> int: ...

    async def stop(self, grace: float) -> None: ...


class GrpcServerFactory(Protocol):
    """Builds a gRPC server of a method table (``--grpc-server``: the constructors of
    ``GrpcServer`` and ``GrpcioServer`` have this form): ``guard`` sees every call first,
    ``budget`` and ``gate`` are shared by the process's listeners."""

    def __call__(
        self,
        methods: Mapping[str, GrpcMethod],
        spec: ListenerSpec | None = None,
        *,
        guard: Guard | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> GrpcServing: ...


class HttpServerFactory(Protocol):
    """Builds an HTTP/1.1 server of a native app (``--http-server``: the constructors of
    ``HttpServer`` and ``UvicornHttpServer`` have this form); ``asgi``, an ASGI middleware
    around the app (tracing), answers in place of ``app.respond`` (``app.refusal`` still
    admits); ``budget`` and ``gate`` are shared by the process's listeners."""

    def __call__(
        self,
        app: NativeApp,
        spec: ListenerSpec | None = None,
        *,
        asgi: AsgiApp | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> HttpServing: ...


#: the ASGI scope key under which the built-in server, running an ASGI middleware around a
#: native app (tracing), hands over its admission of a request with a body made before the
#: body was read: (``admitted``, ``body_limit``, ``body_limit_flag``); read by asgi.py only
ADMITTED_KEY = "inferplex.admitted"

Headers = list[tuple[bytes, bytes]]


class HttpRequest(Protocol):
    """A request as the built-in HTTP server hands it to a handler, complete with its body
    (``transport.http_cycle.Request``): ``path`` percent-decoded, ``raw_path`` as sent;
    ``admitted``, what the admission check returned when it ran before the body was read;
    ``body_limit`` (and the setting named ``body_limit_flag``), the most body bytes it then
    allowed (0: the server's limit)."""

    method: str
    path: str
    raw_path: bytes
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes | memoryview
    admitted: Any
    body_limit: int
    body_limit_flag: str


class StreamedBody:
    """A response body sent as it comes (HTTP/1.1 chunked transfer coding): the chunks of
    ``chunks``, each written once the last has left (a slow reader holds the producer back);
    the server closes the iterator (``aclose``) when it ends or the client goes away."""

    __slots__ = ("chunks",)

    def __init__(self, chunks: AsyncGenerator[bytes, None]) -> None:
        self.chunks = chunks


#: (status, body, headers other than content-length): the body whole, or streamed
Answer = tuple[int, bytes | StreamedBody, Headers]
#: a request refused before its body was read: (status, body, headers)
Refusal = tuple[int, bytes, Headers]


class NativeApp(Protocol):
    """An HTTP application as every server calls it: no ASGI scope or messages (the
    reference server reaches it through ``transport.asgi.AsgiAdapter``).

    ``refusal`` sees a request that comes with a body once its header block is complete,
    before any of the body is read: it returns the answer refusing it, or None to go on,
    having set ``request.admitted`` (kept for ``respond``) and ``request.body_limit``.
    ``respond`` answers a request complete with its body; one without ``admitted`` is
    admitted there."""

    def refusal(self, request: HttpRequest) -> Refusal | None: ...

    async def respond(self, request: HttpRequest) -> Answer: ...


class HttpServing(Protocol):
    """An HTTP/1.1 server of a native app: serves on a bound socket, stops with a grace;
    what it refused by reason, the connections it dropped for not reading, its
    connections, byte budget and gate (metrics/listeners.py reads them)."""

    @property
    def refusals(self) -> Mapping[str, int]: ...

    @property
    def send_timeouts(self) -> int: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def budget(self) -> ByteBudget: ...

    @property
    def gate(self) -> ConnectionGate: ...

    async def start(self, sock: socket.socket) -> None: ...

    async def stop(self, grace: float) -> None: ...
