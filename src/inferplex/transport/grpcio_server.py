"""The reference gRPC server: grpc.aio serving a table of unary methods and bidirectional
streams (``--grpc-server grpcio``).

It serves the same table the built-in server (``transport/grpc_server.py``) serves, with the
same guard, so that the same tests run against both (DESIGN.md, "The edge"):

- each method is a generic unary-unary handler by its exact path (any other path:
  UNIMPLEMENTED); grpc.aio hands over the message as bytes and the table's ``parse`` reads
  it in the handler, so that a message that does not parse is INVALID_ARGUMENT as with the
  built-in server (grpc.aio would answer a failing deserializer with INTERNAL); ``serialize``
  writes the answer there too;
- the guard is a server interceptor: it sees the method and the metadata when the call's
  headers arrive, and a refused call is answered by a handler that never reads the message
  (grpc.aio reads a unary call's message before its handler runs: the refusal is registered as
  a streaming handler, which it starts at once). The tracing wrapper is part of the table
  (the ModelInfer handler), so it runs here as it does in the built-in server;
- errors go through THE table (``protocol/v2/errors.py``): an InferplexError aborts the call
  with its gRPC code, anything else is INTERNAL;
- from our config: the message size limit both ways, the metadata limit, TLS (mutual when a
  client CA is given);
- a compressed message reaches the handler as it came and is inflated there within its
  method's limit (``--max-small-request-bytes`` unless the method is ``large``), charged to
  the server's byte budget (transport/grpcio_messages.py).

grpc.aio cannot serve on a socket it did not create: it binds its own to the address of the
one the composition root bound. That socket stays bound (never listening) until the server
stops: on Linux a socket with SO_REUSEADDR may bind an address another such socket holds as
long as that one does not listen, so grpc-core binds and listens beside it and the port is
never free for another process to take. Where the platform refuses that, the
socket is closed first and grpc.aio binds right after: a process could take the port in
between, and the start then fails naming it.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from inferplex.errors import ConfigError, InferplexError, InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.errors import GRPC_STATUS
from inferplex.transport.connections import ConnectionGate
from inferplex.transport.grpcio_messages import plain
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated
from inferplex.transport.interface import GrpcMethod, Guard, Metadata
from inferplex.transport.listener import ListenerSpec

__all__ = ["GrpcioCall", "GrpcioServer", "grpcio_options", "server_credentials"]

logger = logging.getLogger(__name__)

#: metadata a call may carry when no limit is configured (the built-in server's default)
DEFAULT_METADATA_LIMIT = 1 << 20


class GrpcioCall:
    """What a method handler sees of a call besides its message (as the built-in ``Call``)."""

    __slots__ = ("_context", "_guard", "method")

    def __init__(
        self, method: str, context: aio.ServicerContext[Any, Any], guard: Guard | None
    ) -> None:
        self.method = method
        self._context = context
        self._guard = guard

    @property
    def identity(self) -> object:
        """What the guard returns for this call (who makes it; None without a guard). The
        interceptor that ran the guard cannot hand its answer to the handler: asked again
        (it passed once, with the same metadata)."""
        return None if self._guard is None else self._guard(self.method, self.metadata())

    def metadata(self) -> Metadata:
        """The call's metadata: keys lower-case, ``-bin`` values as bytes."""
        return list(self._context.invocation_metadata() or ())

    @property
    def connection(self) -> object:
        """The connection carrying the call: its peer's address and port."""
        return self._context.peer()


def server_credentials(cert: Path, key: Path, client_ca: Path | None) -> grpc.ServerCredentials:
    """TLS for the listener from the PEM files (security/tls.py has checked them); with
    ``client_ca``, clients must present a certificate signed by it."""
    try:
        pair = (key.read_bytes(), cert.read_bytes())
        root = client_ca.read_bytes() if client_ca is not None else None
    except OSError as exc:
        raise ConfigError(f"TLS files could not be used: {exc}") from None
    return grpc.ssl_server_credentials(
        [pair], root_certificates=root, require_client_auth=client_ca is not None
    )


def grpcio_options(spec: ListenerSpec, gate: ConnectionGate | None = None) -> dict[str, int]:
    """The bounds of ``spec.http2`` grpc-core has a setting for, as channel arguments (the
    others it keeps its own way); its connection cap is server-wide only (grpc-core has
    none per peer) and counts the gRPC port alone, beside the gate that counts the other
    listeners."""
    limits = spec.http2
    cap = gate.max_connections if gate is not None else spec.max_connections
    options = {
        "grpc.max_concurrent_streams": limits.max_concurrent_streams,
        # a client's PINGs: at most one per 5 minutes without calls, two strikes, then GOAWAY
        # ENHANCE_YOUR_CALM; and the server's own keepalive PINGs without data: two at most
        # (grpc-core's defaults, set here so they are ours, not a library version's)
        "grpc.keepalive_permit_without_calls": 0,
        "grpc.http2.min_ping_interval_without_data_ms": 300_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.http2.max_pings_without_data": 2,
    }
    for option, seconds in (
        ("grpc.server_handshake_timeout_ms", limits.preface_timeout_s),
        ("grpc.max_connection_idle_ms", limits.idle_timeout_s),
        ("grpc.keepalive_time_ms", limits.keepalive_s),
        ("grpc.max_connection_age_ms", limits.max_connection_age_s),
    ):
        if seconds > 0:  # 0: no limit, grpc-core's default
            options[option] = int(seconds * 1000)
    if cap > 0:  # 0: none (grpc-core's default)
        options["grpc.max_allowed_incoming_connections"] = cap
    if limits.keepalive_s > 0:
        options["grpc.keepalive_timeout_ms"] = int(limits.keepalive_timeout_s * 1000)
    if limits.max_connection_age_s > 0 and limits.max_connection_age_grace_s > 0:
        options["grpc.max_connection_age_grace_ms"] = int(limits.max_connection_age_grace_s * 1000)
    return options


class _Budget:
    used = 0


class Counters:
    """The built-in server's transport counters, as far as grpc.aio tells: nothing (its
    connections, buffered bytes and limits are inside grpc-core)."""

    __slots__ = ("budget", "buffered", "connections", "exceeded")

    def __init__(self) -> None:
        self.budget = _Budget()
        self.buffered = 0
        self.connections = 0
        self.exceeded: Counter[str] = Counter()


class GrpcioServer:
    """Serves ``methods`` (by path, e.g. ``/package.Service/Method``) on one address."""

    def __init__(
        self,
        methods: Mapping[str, GrpcMethod],
        spec: ListenerSpec | None = None,
        *,
        guard: Guard | None = None,
        budget: ByteBudget | None = None,
        gate: ConnectionGate | None = None,
    ) -> None:
        """``spec``: the limits grpc-core has a setting for (:func:`grpcio_options`) and TLS
        (default: ListenerSpec()'s). A method not marked ``large`` takes messages of up to
        the small limit, compressed or inflated; inflated messages are charged to
        ``budget`` (the server's; default: 1 GiB of its own) while their call runs
        (transport/grpcio_messages.py). ``gate``: the process's connection caps (grpc-core
        counts its own connections, server-wide only: the gate's cap is set on it)."""
        spec = spec if spec is not None else ListenerSpec()
        max_message_bytes = spec.grpc.max_message_bytes
        small = spec.grpc.small
        budget = budget if budget is not None else ByteBudget(1 << 30)
        self._handlers = {
            path: _method_handler(
                path,
                method,
                _Limits(max_message_bytes, max_message_bytes if method.large else small, budget),
                guard,
            )
            for path, method in methods.items()
        }
        self._guard = guard
        tls = spec.tls
        self._credentials = (
            server_credentials(tls.cert, tls.key, tls.client_ca) if tls is not None else None
        )
        metadata = spec.max_header_bytes or DEFAULT_METADATA_LIMIT
        self._options: dict[str, int] = {
            "grpc.max_receive_message_length": max_message_bytes,
            "grpc.max_send_message_length": max_message_bytes,
            "grpc.max_metadata_size": metadata,
            "grpc.absolute_max_metadata_size": metadata,
            # messages as they came: inflated by the handler within the method's limit
            "grpc.per_message_decompression": 0,
            # a port another process listens on is a clash, never shared
            "grpc.so_reuseport": 0,
            **grpcio_options(spec, gate),
        }
        self._server: aio.Server | None = None
        self._sock: socket.socket | None = None
        self.counters = Counters()

    async def start(self, sock: socket.socket) -> int:
        """Serve on the address of ``sock`` (bound; ``transport.sockets.bind``), which is
        closed when the server stops; returns the port."""
        host, port = sock.getsockname()[:2]
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        interceptors = [_Guarding(self._guard, set(self._handlers))] if self._guard else []
        server = aio.server(
            handlers=[_Methods(self._handlers)],
            interceptors=interceptors,
            options=list(self._options.items()),
        )
        try:
            try:
                self._add_port(server, where)
            except RuntimeError:
                sock.close()  # the platform does not share a bound address: free it first
                self._add_port(server, where)
            await server.start()
        except BaseException as exc:
            sock.close()
            if isinstance(exc, RuntimeError):
                raise ConfigError(f"cannot listen for gRPC on {where}: {exc}") from None
            raise
        self._server = server
        self._sock = sock  # kept bound until stop(): harmless beside grpc-core's listener
        return int(port)

    def _add_port(self, server: aio.Server, where: str) -> None:
        if self._credentials is not None:
            bound = server.add_secure_port(where, self._credentials)
        else:
            bound = server.add_insecure_port(where)
        if not bound:  # older grpcio answers 0 instead of raising
            raise RuntimeError(f"failed to bind to {where}")

    async def stop(self, grace: float) -> None:
        """Stop accepting; open calls get ``grace`` seconds, then are cancelled."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._server is None:
            return
        server, self._server = self._server, None
        await server.stop(grace)


class _Methods(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc ships no hints: Any
    """The table: a call's handler by its exact method path."""

    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._handlers = handlers

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return self._handlers.get(handler_call_details.method)


class _Guarding(aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no hints: Any
    """The guard, on each call of a method of the table, before its message is read."""

    def __init__(self, guard: Guard, paths: set[str]) -> None:
        self._guard = guard
        self._paths = paths

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        if method in self._paths:  # an unknown path is UNIMPLEMENTED, whoever calls it
            metadata = handler_call_details.invocation_metadata
            try:
                self._guard(method, list(metadata or ()))
            except InferplexError as exc:
                return _refusal(GRPC_STATUS[exc.code], exc.message)
            except Exception as exc:  # a guard's bug must not take the server down
                logger.exception("gRPC guard failed on %s", method)
                return _refusal(grpc.StatusCode.INTERNAL, f"{method} failed: {exc}")
        return await continuation(handler_call_details)


def _refusal(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    """A handler that answers ``code`` at once, without waiting for a message."""

    async def refuse(requests: Any, context: aio.ServicerContext[Any, Any]) -> None:
        await context.abort(code, message)

    return grpc.stream_stream_rpc_method_handler(refuse)


class _Limits:
    """A method's limits: the server's message limit (responses), the request's, and the
    budget inflated requests are charged to."""

    __slots__ = ("budget", "max_message", "request")

    def __init__(self, max_message: int, request: int, budget: ByteBudget) -> None:
        self.max_message = max_message
        self.request = request
        self.budget = budget


def _method_handler(
    path: str, method: GrpcMethod, limits: _Limits, guard: Guard | None
) -> grpc.RpcMethodHandler:
    if method.refused is not None:
        refused = method.refused
        return _refusal(GRPC_STATUS[refused.code], refused.message)
    max_message = limits.max_message
    if method.streaming:
        return _stream_handler(path, method, limits, guard)

    async def unary(message: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        inflated: Inflated | None = None
        try:
            try:
                data, inflated = await plain(message, limits.request, max_message, limits.budget)
                request = method.parse(data)
            except InferplexError:
                raise
            except Exception as exc:
                raise InvalidInputError(f"the request message could not be parsed: {exc}") from None
            body = method.serialize(await method.handler(request, GrpcioCall(path, context, guard)))
        except InferplexError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except Exception as exc:  # never let one call take the server down
            logger.exception("gRPC %s failed", path)
            await context.abort(grpc.StatusCode.INTERNAL, f"{path} failed: {exc}")
        finally:
            if inflated is not None:
                inflated.release()
        if len(body) > max_message:
            too_large = _too_large(max_message)
            await context.abort(GRPC_STATUS[too_large.code], too_large.message)
        return body

    return grpc.unary_unary_rpc_method_handler(unary)


def _stream_handler(
    path: str, method: GrpcMethod, limits: _Limits, guard: Guard | None
) -> grpc.RpcMethodHandler:
    """A bidirectional stream: the handler takes the parsed messages as they arrive and its
    responses are written one at a time (``write`` waits for the peer's flow-control window:
    a slow reader holds the handler back); its error ends the call with that status."""

    async def stream(requests: Any, context: aio.ServicerContext[Any, Any]) -> None:
        max_message = limits.max_message
        call = GrpcioCall(path, context, guard)
        responses = method.handler(_parsed(requests, method.parse, limits), call)
        try:
            async for response in responses:
                body = method.serialize(response)
                if len(body) > max_message:
                    raise _too_large(max_message)
                await context.write(body)
        except InferplexError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except Exception as exc:  # never let one call take the server down
            logger.exception("gRPC %s failed", path)
            await context.abort(grpc.StatusCode.INTERNAL, f"{path} failed: {exc}")
        finally:
            await responses.aclose()

    return grpc.stream_stream_rpc_method_handler(stream)


async def _parsed(
    requests: Any, parse: Callable[[Any], Any], limits: _Limits
) -> AsyncIterator[Any]:
    """The stream's messages, each inflated if it came compressed and parsed
    (INVALID_ARGUMENT for one that does not); an inflated one stays charged until the
    handler asks for the next."""
    inflated: Inflated | None = None
    try:
        async for message in requests:
            if inflated is not None:
                inflated.release()
            data, inflated = await plain(message, limits.request, limits.max_message, limits.budget)
            try:
                request = parse(data)
            except InferplexError:
                raise
            except Exception as exc:
                raise InvalidInputError(f"a request message could not be parsed: {exc}") from None
            yield request
    finally:
        if inflated is not None:
            inflated.release()


def _too_large(max_message: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"the response message is larger than the limit of {max_message} bytes "
        "(INFERPLEX_MAX_GRPC_MESSAGE_BYTES)"
    )
