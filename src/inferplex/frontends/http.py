"""The V2 HTTP/REST frontend: a raw ASGI 3 application with its own small router.

No web framework: DESIGN.md measured raw ASGI at half the CPU of Starlette per request
(:mod:`inferplex.transport.http_server` serves it). The path is split once and matched by a
few comparisons; each response is one bytes object sent as a single ``http.response.start`` plus one
``http.response.body`` (one write on the socket, see COMPAT.md's latency trap).

Endpoints (model routes also under ``/v2/models/{m}/versions/{v}/...``)::

    GET  /v2/health/live | /v2/health/ready      200 or 503
    GET  /v2                                     server metadata
    GET  /v2/models/{m}                          model metadata
    GET  /v2/models/{m}/ready                    200 or 503
    GET  /v2/models/{m}/config                   Triton model configuration
    POST /v2/models/{m}/infer                    inference (JSON or binary tensor data)
    POST /v2/models/{m}/generate[_stream]        Triton's generate extension (one JSON
                                                 object; server-sent events as they come)
    GET  /v2/models/{m}/stats | /v2/models/stats statistics
    POST /v2/repository/index                    repository index ({"ready": bool} optional)
    POST /v2/repository/models/{m}/load          load / reload ({"parameters": {"config": ..}})
    POST /v2/repository/models/{m}/unload        unload ({"parameters": {...}} optional)
    POST /v2/repository/models/{m}/instances     {"count": n}: instances per version, live
    POST /v2/repository/models/{m}/default_version  {"version": "2"}: unversioned requests
    GET  /v2/repository/memory                   memory budget and model footprints
    GET  /v2/routes | /v2/routes/{r}/stats       routes of routing.yaml, their statistics
    POST /v2/systemsharedmemory/region/{r}/register  {"key", "offset", "byte_size"}
    POST /v2/systemsharedmemory[/region/{r}]/unregister  one region, or all
    GET  /v2/systemsharedmemory[/region/{r}]/status      one region, or all
    POST /v2/cudasharedmemory/region/{r}/register   501: not supported (docs/shared_memory.md)
    GET|POST /v2/cudasharedmemory[/region/{r}]/status|unregister: none registered
    GET  /v1/models[/{id}], POST /v1/completions | /v1/chat/completions | /v1/embeddings
                                                 the OpenAI-compatible API (http_openai.py)

Every error body is ``{"error": "<message>"}`` (under /v1/, OpenAI's error object); the
status of an :class:`InferplexError` comes from the one table in ``protocol/v2/errors.py``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from inferplex.config.server_config import ServerConfig
from inferplex.dataplane import CallMeta, DataPlane
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import (
    InferplexError,
    UnauthenticatedError,
)
from inferplex.frontends.http_answers import call_trace, compressed, traced
from inferplex.frontends.http_body import (
    body_headers,
    inflate_body,
    json_too_large,
    takes_none,
    too_large,
)
from inferplex.frontends.http_generate import Generate
from inferplex.frontends.http_management import ManagementRoutes
from inferplex.frontends.http_openai import OpenAI
from inferplex.frontends.http_routes import Endpoint, RouteError, resolve
from inferplex.frontends.management_json import ManagementBodies
from inferplex.protocol.openai.errors import OPENAI_PREFIX, error_reply, route_error_body
from inferplex.protocol.v2.codecs import REST
from inferplex.protocol.v2.errors import HTTP_STATUS
from inferplex.protocol.v2.rest import parse_header_length
from inferplex.security.access import Access
from inferplex.security.tokens import ANONYMOUS, Principal
from inferplex.tracing.context import TRACING
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.inflate import Inflated
from inferplex.transport.interface import HttpRequest, StreamedBody

__all__ = ["HttpApp", "create_http_app"]

logger = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]
#: a request body: a large one is a memoryview of the buffer the server read it into
Body = bytes | memoryview
#: status, body, headers other than content-length
Reply = tuple[int, bytes, Headers]
#: what an endpoint answers: a whole body, or one streamed as it comes (generate_stream)
AnyReply = tuple[int, bytes | StreamedBody, Headers]

_JSON: Headers = [(b"content-type", b"application/json")]
_EMPTY_OK: Reply = (200, b"", [])
_EMPTY_UNAVAILABLE: Reply = (503, b"", [])


def create_http_app(
    engine: InferenceEngine,
    config: ServerConfig,
    access: Access | None = None,
    plane: DataPlane | None = None,
    budget: ByteBudget | None = None,
) -> HttpApp:
    """The application serving the V2 REST protocol for ``engine`` (``transport.interface.
    NativeApp``; uvicorn reaches it through ``transport.asgi.AsgiAdapter``); ``access`` (the
    listener's surface and tokens) decides who may call which endpoint; inference goes
    through ``plane`` (default: one of its own for ``engine`` and ``config``); inflated
    request bodies are charged to ``budget`` (the server's; default: one of
    ``max_buffered_bytes``)."""
    return HttpApp(engine, config, access, plane, budget)


class HttpApp(ManagementRoutes):
    """The V2 REST app, as every HTTP server calls it (``transport.interface.NativeApp``).

    Every request is first *admitted* (:meth:`admit`): its path resolved to a route, the
    method checked, and the caller's access checked against that route's scope. The built-in
    HTTP server (and the ASGI adapter) admits a request with a body as soon as its headers
    are complete (:meth:`refusal`), so nothing is read from a client that may not send it.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        config: ServerConfig,
        access: Access | None = None,
        plane: DataPlane | None = None,
        budget: ByteBudget | None = None,
    ) -> None:
        self._engine = engine
        # the most body bytes of each POST endpoint (inflated if compressed), and the setting;
        # the other endpoints' JSON
        self._large_limit = (
            config.max_request_bytes,
            "--max-request-bytes, INFERPLEX_MAX_REQUEST_BYTES",
        )
        self._small_limit = (
            config.max_small_request_bytes,
            "--max-small-request-bytes, INFERPLEX_MAX_SMALL_REQUEST_BYTES",
        )
        self._load_limit = (
            min(config.max_load_request_bytes, config.max_request_bytes),
            "--max-load-request-bytes, INFERPLEX_MAX_LOAD_REQUEST_BYTES",
        )
        self._bodies = ManagementBodies(config)
        self._budget = budget if budget is not None else ByteBudget(config.max_buffered_bytes)
        self._max_json = config.max_json_request_bytes  # an inference request's JSON
        self._caps: dict[Endpoint, tuple[int, str, int]] = {}  # _body_caps, by endpoint
        # the one door to the engine for inference (limits, shared memory, routing key)
        self._plane = plane if plane is not None else DataPlane.from_config(engine, config)
        self._access = access if access is not None and access.enabled else None
        # paths seen before and where they lead: a client sends the same few paths again
        # and again; bounded, since paths are the client's choice
        self._routes: dict[str, Route] = {}
        # an HTTP header whose value becomes the request parameter routing_key (sticky routes)
        self._routing_header = self._plane.routing_header
        self._generation = Generate(engine, self._plane)
        #: ``POST .../infer``: the data plane's call with the REST codec, given (body, meta);
        #: a partial, so no frame of the frontend's runs around the data plane's coroutine
        self._infer = functools.partial(self._plane.infer, REST)
        self._openai = OpenAI(engine, self._plane, config)

    async def respond(self, request: HttpRequest) -> AnyReply:
        """A request complete with its body, answered with (status, body, headers other than
        content-length)."""
        return await self._serve(
            request.method,
            request.path,
            request.raw_path,
            request.headers,
            request.admitted,
            request.body,
        )

    def admit(self, method: str, path: str, raw_path: bytes | None, headers: Headers) -> Admitted:
        """The route of a request and its principal, once its method and the caller's access
        to it are checked; raises RouteError (400/404/405) or InferplexError (401/403). A
        query string plays no part: it is not passed here."""
        # a path that came percent-encoded is resolved afresh: its decoded form may match a
        # remembered canonical path that it must not be taken for
        encoded = raw_path is not None and b"%" in raw_path
        route = None if encoded else self._routes.get(path)
        if route is None:
            route = self._resolve(path, raw_path, remember=not encoded)
        endpoint = route[0]
        if method != endpoint.method and not (method == "HEAD" and endpoint.method == "GET"):
            raise RouteError(
                405,
                f"method {method} is not allowed on {path}, use {endpoint.method}",
                [(b"allow", endpoint.method.encode())],
            )
        if self._access is None:
            return route, ANONYMOUS
        return route, self._access.http_check(endpoint.scope, endpoint.api, headers, path)

    def refusal(self, request: HttpRequest) -> tuple[int, bytes, Headers] | None:
        """The answer to a request (its header block complete, its body not yet read) that
        :meth:`admit` refuses, or whose body its endpoint does not take (status, body,
        headers); None when it may go on: then its route and principal are kept in
        ``request.admitted``, and the most body bytes its endpoint takes in
        ``request.body_limit``."""
        try:
            admitted = self.admit(request.method, request.path, request.raw_path, request.headers)
            endpoint = admitted[0][0]
            if endpoint.method != "POST":  # admitted here: it comes with a body
                raise takes_none(request.path, endpoint)
            limit, flag, json_limit = self._caps.get(endpoint) or self._body_caps(endpoint)
            body_headers(request.headers, limit, flag, json_limit)
            request.body_limit, request.body_limit_flag = limit, flag
            request.admitted = admitted
        except (InferplexError, RouteError) as exc:
            return _error_reply(exc, request.path)
        return None

    async def _serve(
        self,
        method: str,
        path: str,
        raw_path: bytes | None,
        headers: Headers,
        admitted: Admitted | None,
        body: Body,
    ) -> AnyReply:
        """The answer to one request whose body is ``body`` (whole: a transport reads it
        within the limit ``refusal`` set)."""
        trace = call_trace(headers) if TRACING.enabled else None
        inflated: Inflated | None = None
        try:
            (endpoint, handler, model, version), principal = admitted or self.admit(
                method, path, raw_path, headers
            )
            if endpoint.method == "POST":
                limit, flag, json_limit = self._caps.get(endpoint) or self._body_caps(endpoint)
                header_length, coding, accept = body_headers(headers, limit, flag)
                if coding is not None:
                    body, inflated = await self._inflate(body, coding, limit, flag)
                _check_size(body, limit, flag, json_limit if header_length is None else 0)
            else:
                if body:  # a transport refuses it before reading it; never answered with one
                    raise takes_none(path, endpoint)
                header_length, accept = None, None
            if endpoint.api != "inference":  # the inference calls take (body, meta)
                return await handler(model, version, body, header_length, principal)
            # an inference call: the data plane's, the transport mapped to (body, meta)
            meta = CallMeta(
                model,
                version,
                self._engine.shared_memory.owned_by(principal),  # the caller's regions
                _header(headers, self._routing_header) if self._routing_header else None,
                None,
                None if header_length is None else parse_header_length(header_length),
                trace,
                headers,
            )
            reply: AnyReply = await handler(body, meta)
            if accept is not None and endpoint.handler == "_infer":
                reply = await compressed(reply, accept)
            return reply if trace is None else traced(reply, trace)
        except (InferplexError, RouteError) as exc:
            reply = _error_reply(exc, path)
            return reply if trace is None else traced(reply, trace)
        except Exception as exc:
            # never let one request take the connection or the server down
            logger.exception("unexpected error serving %s %s", method, path)
            return 500, _error(f"internal server error: {type(exc).__name__}: {exc}"), _JSON
        finally:
            if inflated is not None:  # answered: its bytes leave the server's budget
                inflated.release()

    async def _inflate(
        self, body: Body, coding: bytes, limit: int, flag: str
    ) -> tuple[Body, Inflated]:
        """A compressed POST body inflated within its endpoint's ``limit`` (the inflated
        bytes charged until answered)."""
        _check_size(body, limit, flag, 0)
        inflated = await inflate_body(body, coding, limit, flag, self._budget)
        return inflated.data, inflated

    def _body_caps(self, endpoint: Endpoint) -> tuple[int, str, int]:
        """The most body bytes ``endpoint`` takes, the setting that says so, and the most
        JSON its body may hold (0: not checked: a load's files are base64 strings, the small
        endpoints' bodies are small); kept per endpoint."""
        if endpoint.handler == "_model_load":
            caps = (*self._load_limit, 0)
        elif endpoint.large_body:
            caps = (*self._large_limit, self._max_json)
        else:
            caps = (*self._small_limit, 0)
        self._caps[endpoint] = caps
        return caps

    def _resolve(self, path: str, raw_path: bytes | None, remember: bool) -> Route:
        endpoint, model, version = resolve(path, raw_path)
        route: Route = (endpoint, getattr(self, endpoint.handler), model, version)
        if remember:
            if len(self._routes) >= _ROUTES_KEPT:
                self._routes.clear()
            self._routes[path] = route
        return route

    # -- inference calls, the data plane's: (body, meta) ---------------------------------------
    async def _generate(self, body: Body, meta: CallMeta) -> AnyReply:
        """Triton's generate extension (frontends/http_generate.py)."""
        return await self._generation.generate(body, meta)

    async def _generate_stream(self, body: Body, meta: CallMeta) -> AnyReply:
        return await self._generation.generate_stream(body, meta)

    # -- the OpenAI-compatible API (frontends/http_openai.py, docs/openai.md) -----------------
    async def _openai_models(self, *_: Any) -> AnyReply:
        return await self._openai.models()

    async def _openai_model(self, model: str, *_: Any) -> AnyReply:
        return await self._openai.model(model)

    async def _openai_completions(self, body: Body, meta: CallMeta) -> AnyReply:
        return await self._openai.completions(body, meta)

    async def _openai_chat(self, body: Body, meta: CallMeta) -> AnyReply:
        return await self._openai.chat(body, meta)

    async def _openai_embeddings(self, body: Body, meta: CallMeta) -> AnyReply:
        return await self._openai.embeddings(body, meta)

    # -- the other handlers: (model, version, body, raw Inference-Header-Content-Length,
    # -- principal)
    async def _live(self, *_: Any) -> Reply:
        return _EMPTY_OK if self._engine.live() else _EMPTY_UNAVAILABLE

    async def _ready(self, *_: Any) -> Reply:
        return _EMPTY_OK if self._engine.ready() else _EMPTY_UNAVAILABLE

    async def _server_metadata(self, *_: Any) -> Reply:
        return _json(self._engine.server_metadata())

    async def _model_metadata(self, model: str, version: str, *_: Any) -> Reply:
        return _json(self._engine.model_metadata(model, version))

    async def _model_ready(self, model: str, version: str, *_: Any) -> Reply:
        return _EMPTY_OK if self._engine.model_ready(model, version) else _EMPTY_UNAVAILABLE

    async def _model_config(self, model: str, version: str, *_: Any) -> Reply:
        return _json(self._engine.model_config(model, version).to_triton_dict())

    async def _model_stats(self, model: str, version: str, *_: Any) -> Reply:
        return _json({"model_stats": self._engine.model_statistics(model, version)})


#: a handler: (model, version, body, raw header length, principal), or an inference call's
#: (body, meta)
Handler = Callable[..., Awaitable[AnyReply]]
#: an admitted request's endpoint, the bound handler, the model (or region) and version
Route = tuple[Endpoint, Handler, str, str]
#: a route and who asks for it (the principal its token makes it)
Admitted = tuple[Route, Principal]

#: how many resolved paths an app remembers
_ROUTES_KEPT = 1024


def _check_size(body: Body, limit: int, flag: str, json_limit: int) -> None:
    """A body within its endpoint's ``limit``, and all-JSON one within ``json_limit`` (0:
    not checked)."""
    if len(body) > limit:
        raise too_large(f"{len(body)} bytes", limit, flag)
    if json_limit and len(body) > json_limit:
        raise json_too_large(len(body), json_limit)


def _header(headers: Headers, name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def _json(document: Any) -> Reply:
    return 200, orjson.dumps(document), _JSON


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _error_reply(exc: InferplexError | RouteError, path: str = "") -> Reply:
    """The answer to a refused request: ``{"error": ...}`` with the error's status (under
    /v1/, OpenAI's error object)."""
    openai = path.startswith(OPENAI_PREFIX)
    if isinstance(exc, RouteError):
        body = route_error_body(exc.status, exc.message) if openai else _error(exc.message)
        return exc.status, body, [*_JSON, *exc.headers]
    headers = _JSON
    if isinstance(exc, UnauthenticatedError):
        headers = [*_JSON, (b"www-authenticate", b"Bearer")]
    if openai:
        return (*error_reply(exc), headers)
    return HTTP_STATUS[exc.code], _error(exc.message), headers
