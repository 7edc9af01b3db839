"""The bodies of the HTTP endpoints other than inference: how large each may be, and their
JSON read into objects.

These bodies are small JSON documents (an index filter, an instance count, a shared-memory
region) parsed whole, so they are capped far below an inference body
(``--max-management-json-bytes``); a load request carries base64 model files (Triton's
``file:`` overrides) and has its own cap (``--max-load-request-bytes``). A body above
``OFFLOAD_BYTES`` is parsed in a worker thread, so that a large one does not hold the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import orjson

from inferplex.config.server_config import ServerConfig
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.offload import OFFLOAD_BYTES

__all__ = ["BodyLimit", "body_limits", "json_object", "load_parameters"]

Body = bytes | memoryview


class BodyLimit(NamedTuple):
    """The most bytes an endpoint's request body may have, and the setting that says so."""

    bytes: int
    setting: str

    def too_large(self, what: str) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"request body of {what} is above the limit of {self.bytes} bytes ({self.setting})"
        )


#: the handlers of the endpoints, other than inference and load, whose body is JSON
_MANAGEMENT_JSON = (
    "_repository_index",
    "_model_unload",
    "_model_instances",
    "_model_default_version",
    "_shm_register",
    "_shm_unregister",
    "_cuda_shm_register",
    "_cuda_shm_unregister",
)


def body_limits(config: ServerConfig) -> dict[str, BodyLimit]:
    """The limit of each endpoint's body other than inference's, by its handler's name."""
    most = config.max_request_bytes
    management = BodyLimit(
        min(config.max_management_json_bytes, most),
        "--max-management-json-bytes, INFERPLEX_MAX_MANAGEMENT_JSON_BYTES",
    )
    limits = dict.fromkeys(_MANAGEMENT_JSON, management)
    limits["_model_load"] = BodyLimit(
        min(config.max_load_request_bytes, most),
        "--max-load-request-bytes, INFERPLEX_MAX_LOAD_REQUEST_BYTES",
    )
    return limits


async def json_object(body: Body, what: str) -> dict[str, Any]:
    """The JSON object of a management request body ({} when the body is empty); a large
    body comes as a memoryview (the server read it into place), and is parsed in a worker
    thread (its size is capped: see ``BodyLimit``)."""
    try:
        if len(body) <= OFFLOAD_BYTES:
            document = _loads(body)
        else:
            document = await asyncio.to_thread(_loads, body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"malformed JSON in the {what} request: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidInputError(f"the {what} request must be a JSON object")
    return document


def _loads(body: Body) -> Any:
    """The JSON document of ``body``, {} for one of blanks only."""
    return orjson.loads(body) if bytes(body).strip() else {}


def load_parameters(options: dict[str, Any], what: str) -> dict[str, Any]:
    """The ``parameters`` object of a load or unload request (Triton's shape)."""
    unknown = set(options) - {"parameters"}
    if unknown:
        raise InvalidInputError(
            f"unknown field(s) {', '.join(sorted(unknown))} in the {what} request; "
            'expected {"parameters": {...}}'
        )
    parameters = options.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInputError(f"the {what} request's 'parameters' must be a JSON object")
    return parameters
