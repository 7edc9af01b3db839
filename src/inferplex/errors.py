"""The error hierarchy. Each error carries a transport-neutral ErrorCode; the single table in
protocol/v2/errors.py maps a code to its HTTP status and gRPC status code."""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    UNIMPLEMENTED = "unimplemented"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    HEADERS_TOO_LARGE = "headers_too_large"
    INTERNAL = "internal"


class InferplexError(Exception):
    """Base of every error the server reports to a client."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(InferplexError):
    """The request is malformed or does not match the model's declared inputs."""

    code = ErrorCode.INVALID_ARGUMENT


class ModelNotFoundError(InferplexError):
    """No model (or version) of that name is known."""

    code = ErrorCode.NOT_FOUND


#: Triton's words for a model or version that cannot serve a request: its clients and
#: examples look for them in the message (``"Request for unknown model" in ex.message()``)
UNKNOWN_MODEL = "Request for unknown model: "


def unknown_model(name: str) -> ModelNotFoundError:
    """No model ``name`` is known, in Triton's words."""
    return ModelNotFoundError(f"{UNKNOWN_MODEL}'{name}' is not found")


class ModelNotReadyError(InferplexError):
    """The model exists but cannot serve now (loading, failed, unloading). Retryable."""

    code = ErrorCode.UNAVAILABLE


class ServerBusyError(InferplexError):
    """A queue or another bounded resource is full. Retryable."""

    code = ErrorCode.UNAVAILABLE


class StreamLimitError(InferplexError):
    """A bound on streams a client may hold open (gRPC health Watch) is reached."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class DeadlineExceededError(InferplexError):
    """The request's timeout passed, or cannot be met given the model's execution time."""

    code = ErrorCode.DEADLINE_EXCEEDED


class PayloadTooLargeError(InferplexError):
    """The request body is above the configured size limit."""

    code = ErrorCode.PAYLOAD_TOO_LARGE


class UnsupportedError(InferplexError):
    """The request asks for something this server does not implement."""

    code = ErrorCode.UNIMPLEMENTED


class UnauthenticatedError(InferplexError):
    """The request carries no valid credentials (API token) for an endpoint that needs them."""

    code = ErrorCode.UNAUTHENTICATED


class PermissionDeniedError(InferplexError):
    """The credentials are valid but not for this endpoint (wrong scope, or a feature that is
    off by default and needs a server flag)."""

    code = ErrorCode.PERMISSION_DENIED


class HeadersTooLargeError(InferplexError):
    """The request's headers (or gRPC metadata) are above the configured size limit."""

    code = ErrorCode.HEADERS_TOO_LARGE


class RegionNotFoundError(InferplexError):
    """No shared-memory region of that name is registered."""

    code = ErrorCode.NOT_FOUND


class TooManyRegionsError(InferplexError):
    """A principal holds as many shared-memory regions as it may (each holds a descriptor)."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class ModelExecutionError(InferplexError):
    """The backend failed while running the model."""

    code = ErrorCode.INTERNAL


class ConfigError(InferplexError):
    """A model configuration cannot be read or is inconsistent."""

    code = ErrorCode.INVALID_ARGUMENT


class ModelLoadError(InferplexError):
    """A model (or a new version of it) could not be loaded; the reason is in the message.
    INVALID_ARGUMENT, as Triton answers a load that fails."""

    code = ErrorCode.INVALID_ARGUMENT


def load_failed(name: str, reason: str) -> ModelLoadError:
    """A load of ``name`` failed, in Triton's words ("load failed for model 'x': ...")."""
    return ModelLoadError(f"load failed for model '{name}': {reason}")


class ModelControlDisabledError(InferplexError):
    """Loading and unloading through the API is off (``--model-control-mode none``), as in
    Triton, which answers such requests with UNAVAILABLE."""

    code = ErrorCode.UNAVAILABLE


class InsufficientMemoryError(InferplexError):
    """A model does not fit into ``--memory-limit``, even after evicting idle models."""

    code = ErrorCode.RESOURCE_EXHAUSTED
