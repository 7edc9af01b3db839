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


class ModelNotReadyError(InferplexError):
    """The model exists but cannot serve now (loading, failed, unloading). Retryable."""

    code = ErrorCode.UNAVAILABLE


class ServerBusyError(InferplexError):
    """A queue or another bounded resource is full. Retryable."""

    code = ErrorCode.UNAVAILABLE


class DeadlineExceededError(InferplexError):
    """The request's timeout passed, or cannot be met given the model's execution time."""

    code = ErrorCode.DEADLINE_EXCEEDED


class PayloadTooLargeError(InferplexError):
    """The request body is above the configured size limit."""

    code = ErrorCode.PAYLOAD_TOO_LARGE


class UnsupportedError(InferplexError):
    """The request asks for something this server does not implement."""

    code = ErrorCode.UNIMPLEMENTED


class ModelExecutionError(InferplexError):
    """The backend failed while running the model."""

    code = ErrorCode.INTERNAL


class ConfigError(InferplexError):
    """A model configuration cannot be read or is inconsistent."""

    code = ErrorCode.INVALID_ARGUMENT
