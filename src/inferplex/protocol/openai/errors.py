"""OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP
status of the error (as OpenAI and vLLM answer: 400 invalid_request_error, 401
authentication_error, 404 the model is not found, 413 the body is too large, 429 / 503 the
server cannot take it now, 500 the model failed)."""

from __future__ import annotations

from typing import Any

import orjson

from inferplex.errors import ErrorCode, InferplexError, InvalidInputError
from inferplex.protocol.v2.errors import HTTP_STATUS

#: OpenAI's ``type`` of an error, by the server's code
_TYPES: dict[ErrorCode, str] = {
    ErrorCode.INVALID_ARGUMENT: "invalid_request_error",
    ErrorCode.NOT_FOUND: "not_found_error",
    ErrorCode.UNAUTHENTICATED: "authentication_error",
    ErrorCode.PERMISSION_DENIED: "permission_error",
    ErrorCode.PAYLOAD_TOO_LARGE: "invalid_request_error",
    ErrorCode.HEADERS_TOO_LARGE: "invalid_request_error",
    ErrorCode.RESOURCE_EXHAUSTED: "rate_limit_error",
    ErrorCode.UNAVAILABLE: "service_unavailable_error",
    ErrorCode.DEADLINE_EXCEEDED: "timeout_error",
    ErrorCode.UNIMPLEMENTED: "invalid_request_error",
    ErrorCode.INTERNAL: "server_error",
}


class FieldError(InvalidInputError):
    """A request field the server or the model cannot take: a 400 whose ``param`` names it."""

    def __init__(self, param: str | None, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.error_code = code


def error_object(error: InferplexError) -> dict[str, Any]:
    """The OpenAI error object of ``error``."""
    code: str | None = getattr(error, "error_code", None)
    if code is None and error.code is ErrorCode.NOT_FOUND:
        code = "model_not_found"
    return {
        "error": {
            "message": error.message,
            "type": _TYPES.get(error.code, "server_error"),
            "param": getattr(error, "param", None),
            "code": code,
        }
    }


def error_reply(error: InferplexError) -> tuple[int, bytes]:
    """The status and JSON body of ``error``."""
    return HTTP_STATUS[error.code], orjson.dumps(error_object(error))


def error_event(error: InferplexError) -> bytes:
    """An error met after a stream began: one ``data:`` event with the error object."""
    return b"data: " + orjson.dumps(error_object(error)) + b"\n\n"


#: the paths whose refusals (a route, the caller's access, a body's size) are OpenAI's
OPENAI_PREFIX = "/v1/"

_ROUTE_TYPES = {404: "not_found_error", 405: "invalid_request_error"}


def route_error_body(status: int, message: str) -> bytes:
    """The OpenAI error object of a path refused before any endpoint ran."""
    kind = _ROUTE_TYPES.get(status, "invalid_request_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}})
