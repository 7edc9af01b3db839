"""The bodies of the HTTP endpoints other than inference: how large each may be, and their
JSON read into objects.

These bodies are small JSON documents (an index filter, an instance count, a shared-memory
region) parsed whole, so they are capped far below an inference body
(``--max-management-json-bytes``); a load request carries base64 model files (Triton's
``file:`` overrides) and has its own cap (``--max-load-request-bytes``). A body above
``OFFLOAD_BYTES`` is parsed in a worker thread with the garbage collector paused, and a load
whose JSON holds more values than a management body could is refused before its parse (a
parse holds the GIL throughout, in any thread).
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import orjson

from inferplex.config.server_config import ServerConfig
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.offload import OFFLOAD_BYTES
from inferplex.protocol.v2.rest import gc_paused

__all__ = ["BodyLimit", "ManagementBodies", "load_parameters"]

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


class ManagementBodies:
    """The limits of the bodies of the endpoints other than inference, and their JSON."""

    def __init__(self, config: ServerConfig) -> None:
        most = config.max_request_bytes
        management = BodyLimit(
            min(config.max_management_json_bytes, most),
            "--max-management-json-bytes, INFERPLEX_MAX_MANAGEMENT_JSON_BYTES",
        )
        #: each endpoint's limit, by its handler's name
        self.limits = dict.fromkeys(_MANAGEMENT_JSON, management)
        self.limits["_model_load"] = BodyLimit(
            min(config.max_load_request_bytes, most),
            "--max-load-request-bytes, INFERPLEX_MAX_LOAD_REQUEST_BYTES",
        )
        # a load's bytes are its files' strings; its values, no more than a management
        # body can hold (at most one per 2 bytes: "1,1,..."): parsing is per value
        self._max_values = management.bytes // 2

    async def json(self, body: Body, what: str) -> dict[str, Any]:
        """The JSON object of a request body ({} when the body is empty); a large body
        comes as a memoryview (the server read it into place), and is parsed in a worker
        thread."""
        try:
            if len(body) <= OFFLOAD_BYTES:
                document = _loads(body)
            else:
                document = await asyncio.to_thread(self._parse, body, what)
        except orjson.JSONDecodeError as exc:
            raise InvalidInputError(f"malformed JSON in the {what} request: {exc}") from None
        if not isinstance(document, dict):
            raise InvalidInputError(f"the {what} request must be a JSON object")
        return document

    def _parse(self, body: Body, what: str) -> Any:
        """A large body's document. orjson holds the GIL through a parse, whatever thread
        runs it, and takes time per value (0.1-0.25 s per million small ones, 4x that with
        the garbage collector running): so a body with more values than the management
        cap allows is refused before the parse, and the collector is paused during it."""
        if len(body) > self._max_values and _values_at_most(body) > self._max_values:
            raise PayloadTooLargeError(
                f"the {what} request holds more than {self._max_values} JSON values: model "
                "files go in 'file:' parameters as base64 strings, and the rest must fit "
                "--max-management-json-bytes (INFERPLEX_MAX_MANAGEMENT_JSON_BYTES)"
            )
        with gc_paused():
            return _loads(body)


#: bytes of a body scanned per call when its values are counted (each call short)
_SCAN_BYTES = 1 << 20


def _values_at_most(body: Body) -> int:
    """At least the number of JSON values in ``body`` (each but the first follows a ',',
    ':', '[' or '{'; those inside strings count too), a slice at a time."""
    view = memoryview(body)
    count = 0
    for low in range(0, len(view), _SCAN_BYTES):
        piece = bytes(view[low : low + _SCAN_BYTES])
        count += piece.count(b",") + piece.count(b":") + piece.count(b"[") + piece.count(b"{")
    return count


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
