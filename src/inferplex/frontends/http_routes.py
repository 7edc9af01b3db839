"""The V2 REST route table (and the OpenAI-compatible API's, under /v1): which path runs which
handler, with which method, in which scope.

A path is matched only in its canonical form. Anything a client could use to make two
spellings of one path — repeated or trailing slashes, ``.`` / ``..`` segments, an encoded
``/`` or ``\\``, control characters — is refused with 400 before any handler runs, so that
the route that runs and the scope that authorised it are always the same thing (the
management API was reachable as ``//v2/repository/...`` while scopes were read off the raw
path). A query string is not part of the path: no V2
endpoint reads one, and, as Triton does, it is accepted and ignored (tritonclient sends its
``query_params``); it changes neither the route nor its scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from inferplex.security.scopes import Scope

__all__ = ["Endpoint", "ResolvedRoute", "RouteError", "resolve"]

Headers = list[tuple[bytes, bytes]]

_HEALTH = Scope.HEALTH
_INFERENCE = Scope.INFERENCE
_MANAGEMENT = Scope.MANAGEMENT


class RouteError(Exception):
    """A request for a path this server does not serve (400 not canonical, 404 none, 405
    wrong method)."""

    def __init__(self, status: int, message: str, headers: Headers | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One endpoint: its HTTP method, the name of the ``HttpApp`` method that answers it, the
    scope that guards it, and whether it takes a large body (inference, loads: up to
    ``--max-request-bytes``); another POST endpoint takes a small one
    (``--max-small-request-bytes``), a GET endpoint none. ``api``: its category among
    Triton's restricted APIs (security/restricted.py), None for none."""

    method: str
    handler: str
    scope: Scope
    large_body: bool = False
    api: str | None = None


class ResolvedRoute(NamedTuple):
    endpoint: Endpoint
    model: str  # the model (or region, or route) named in the path; "" if none
    version: str


#: the category of each handler's endpoint among Triton's restricted APIs (Triton's own
#: endpoints as Triton files them; inferplex's model-control ones with the repository's)
_APIS: dict[str, str] = {
    **dict.fromkeys(("_live", "_ready", "_model_ready"), "health"),
    **dict.fromkeys(("_server_metadata", "_model_metadata", "_route_listing"), "metadata"),
    **dict.fromkeys(
        (
            "_infer",
            "_generate",
            "_generate_stream",
            "_openai_completions",
            "_openai_chat",
            "_openai_embeddings",
        ),
        "inference",
    ),
    "_model_config": "model-config",
    **dict.fromkeys(("_model_stats", "_route_stats"), "statistics"),
    **dict.fromkeys(
        (
            "_repository_index",
            "_model_load",
            "_model_unload",
            "_model_instances",
            "_model_default_version",
            "_repository_memory",
            # as Triton's OpenAI frontend files /v1/models
            "_openai_models",
            "_openai_model",
        ),
        "model-repository",
    ),
    **dict.fromkeys(
        (
            "_shm_register",
            "_shm_unregister",
            "_shm_status",
            "_cuda_shm_register",
            "_cuda_shm_unregister",
            "_cuda_shm_status",
        ),
        "shared-memory",
    ),
}


def _get(handler: str, scope: Scope = _INFERENCE) -> Endpoint:
    return Endpoint("GET", handler, scope, api=_APIS[handler])


def _post(handler: str, scope: Scope = _INFERENCE, large_body: bool = False) -> Endpoint:
    return Endpoint("POST", handler, scope, large_body, _APIS[handler])


#: the last path segment of a model route (/v2/models/{m}[/versions/{v}]/{action})
_MODEL_ACTIONS: dict[str, Endpoint] = {
    "infer": _post("_infer", large_body=True),
    "generate": _post("_generate", large_body=True),
    "generate_stream": _post("_generate_stream", large_body=True),
    "ready": _get("_model_ready"),
    "config": _get("_model_config"),
    "stats": _get("_model_stats"),
}
_MODEL_METADATA = _get("_model_metadata")

#: the fixed routes, by their path segments after "v2"
_FIXED: dict[tuple[str, ...], Endpoint] = {
    (): _get("_server_metadata"),
    ("health", "live"): _get("_live", _HEALTH),
    ("health", "ready"): _get("_ready", _HEALTH),
    ("models", "stats"): _get("_model_stats"),
    ("repository", "index"): _post("_repository_index"),
    ("repository", "memory"): _get("_repository_memory"),
    ("routes",): _get("_route_listing"),
    ("systemsharedmemory", "status"): _get("_shm_status", _MANAGEMENT),
    ("systemsharedmemory", "unregister"): _post("_shm_unregister", _MANAGEMENT),
    ("cudasharedmemory", "status"): _get("_cuda_shm_status", _MANAGEMENT),
    ("cudasharedmemory", "unregister"): _post("_cuda_shm_unregister", _MANAGEMENT),
}

#: /v2/{kind}/region/{r}/{action}, per kind of shared memory
_SHM_ACTIONS: dict[str, dict[str, Endpoint]] = {
    "systemsharedmemory": {
        "register": _post("_shm_register", _MANAGEMENT),
        "unregister": _post("_shm_unregister", _MANAGEMENT),
        "status": _get("_shm_status", _MANAGEMENT),
    },
    "cudasharedmemory": {
        "register": _post("_cuda_shm_register", _MANAGEMENT),
        "unregister": _post("_cuda_shm_unregister", _MANAGEMENT),
        "status": _get("_cuda_shm_status", _MANAGEMENT),
    },
}

#: the last path segment of /v2/repository/models/{m}/{action}
_REPOSITORY_ACTIONS: dict[str, Endpoint] = {
    # a config and model files (base64) may come with a load
    "load": _post("_model_load", _MANAGEMENT, large_body=True),
    "unload": _post("_model_unload", _MANAGEMENT),
    "instances": _post("_model_instances", _MANAGEMENT),
    "default_version": _post("_model_default_version", _MANAGEMENT),
}

_ROUTE_STATS = _get("_route_stats")

#: the OpenAI-compatible API (docs/openai.md), by its path segments after "v1"; its bodies
#: are capped as /infer's
_OPENAI: dict[tuple[str, ...], Endpoint] = {
    ("models",): _get("_openai_models"),
    ("completions",): _post("_openai_completions", large_body=True),
    ("chat", "completions"): _post("_openai_chat", large_body=True),
    ("embeddings",): _post("_openai_embeddings", large_body=True),
}
_OPENAI_MODEL = _get("_openai_model")

#: percent-encodings that would let one path be spelled two ways: '/' and '\'
_ENCODED_SEPARATORS = (b"%2f", b"%5c")


def resolve(path: str, raw_path: bytes | None = None) -> ResolvedRoute:
    """The route of a request for ``path`` (percent-decoded; ``raw_path`` as sent, if
    known). Raises RouteError: 400 for a path that is not canonical, 404 for no route."""
    _check_canonical(path, raw_path)
    parts = path[1:].split("/")
    count = len(parts)
    if parts[0] != "v2":
        return _openai_route(path, parts)
    # the hot path first: /v2/models/{m}[/versions/{v}]/{action}
    if count >= 4 and parts[1] == "models":
        model = parts[2]
        version = ""
        rest = 3
        if count >= 5 and parts[3] == "versions":
            version = parts[4]
            rest = 5
        if count == rest:
            return ResolvedRoute(_MODEL_METADATA, model, version)
        action = _MODEL_ACTIONS.get(parts[rest]) if count == rest + 1 else None
        if action is not None:
            return ResolvedRoute(action, model, version)
    else:
        route = _other_route(parts)
        if route is not None:
            return route
    raise RouteError(404, f"no endpoint at {path}; V2 endpoints are under /v2")


def _openai_route(path: str, parts: list[str]) -> ResolvedRoute:
    """The route of a path outside /v2: the OpenAI API's under /v1, if it is one."""
    if parts[0] == "v1":
        found = _OPENAI.get(tuple(parts[1:]))
        if found is not None:
            return ResolvedRoute(found, "", "")
        if len(parts) == 3 and parts[1] == "models":
            return ResolvedRoute(_OPENAI_MODEL, parts[2], "")
    raise RouteError(
        404, f"no endpoint at {path}; V2 endpoints are under /v2, the OpenAI API's under /v1"
    )


def _other_route(parts: list[str]) -> ResolvedRoute | None:
    """The route of a /v2 path (split at '/') other than /v2/models/{m}/..., if any."""
    fixed = _FIXED.get(tuple(parts[1:]))
    if fixed is not None:
        return ResolvedRoute(fixed, "", "")
    count = len(parts)
    if count == 3 and parts[1] == "models":
        return ResolvedRoute(_MODEL_METADATA, parts[2], "")
    if count == 5 and parts[1] == "repository" and parts[2] == "models":
        action = _REPOSITORY_ACTIONS.get(parts[4])
        if action is not None:
            return ResolvedRoute(action, parts[3], "")
    if count == 4 and parts[1] == "routes" and parts[3] == "stats":
        return ResolvedRoute(_ROUTE_STATS, parts[2], "")
    if count == 5 and parts[1] in _SHM_ACTIONS and parts[2] == "region":
        action = _SHM_ACTIONS[parts[1]].get(parts[4])
        if action is not None:
            return ResolvedRoute(action, parts[3], "")
    return None


def _check_canonical(path: str, raw_path: bytes | None) -> None:
    if not path.startswith("/"):
        raise RouteError(400, f"the request target {path!r} must be a path starting with '/'")
    if raw_path is not None and b"%" in raw_path:
        lowered = raw_path.lower()
        for encoded in _ENCODED_SEPARATORS:
            if encoded in lowered:
                raise RouteError(
                    400, f"path {path!r}: an encoded '/' or '\\' ({encoded.decode()}) is refused"
                )
    for part in path[1:].split("/") if path != "/" else ():
        if part in ("", ".", ".."):
            raise RouteError(
                400,
                f"path {path!r} is not canonical: no empty, '.' or '..' segments "
                "(repeated or trailing '/')",
            )
    if not path.isprintable():
        raise RouteError(400, f"path {path!r} has control characters")
