"""The JSON bodies of the HTTP endpoints other than inference, read into objects.

These bodies are small JSON documents (an index filter, an instance count, a shared-memory
region) held to ``--max-small-request-bytes`` (frontends/http_body.py); a load request
carries base64 model files (Triton's ``file:`` overrides) within ``--max-load-request-bytes``.
A body above ``OFFLOAD_BYTES`` is parsed in a worker thread with the garbage collector
paused, and one whose JSON holds more values than a load's config may have is refused before
its parse (a parse holds the GIL throughout, in any thread).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from inferplex.config.server_config import ServerConfig
from inferplex.dataplane.offload import OFFLOAD_BYTES
from inferplex.errors import InvalidInputError, PayloadTooLargeError
from inferplex.protocol.v2.rest import gc_paused

__all__ = ["ManagementBodies", "load_parameters"]

Body = bytes | memoryview


class ManagementBodies:
    """The JSON of the bodies of the endpoints other than inference."""

    def __init__(self, config: ServerConfig) -> None:
        # a load's bytes are its files' strings; its values, no more than its config may
        # hold (at most one per 2 bytes: "1,1,..."): parsing is per value
        self._max_values = config.max_load_config_bytes // 2

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
                "--max-load-config-bytes (INFERPLEX_MAX_LOAD_CONFIG_BYTES)"
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
