"""A call's server span while the data plane serves it (``tracing/calls.py`` opens it)."""

from __future__ import annotations

from typing import Any

from inferplex.dataplane.codec import SpanLabel
from inferplex.errors import ErrorCode, InferplexError
from inferplex.tracing.context import CURRENT, CallSpan

__all__ = ["TracedCall"]


class TracedCall:
    """A call's open span: its record is the current task's (the model version notes its
    queue and batch times in it) until ``detach``; ``end`` closes it with the call's status."""

    __slots__ = ("_label", "_span", "_token")

    def __init__(self, span: CallSpan, label: SpanLabel) -> None:
        self._span = span
        self._label = label
        self._token: Any = CURRENT.set(span.record)

    def detach(self) -> None:
        """The current task no longer serves the call (a stream's items are read elsewhere)."""
        if self._token is not None:
            CURRENT.reset(self._token)
            self._token = None

    def end(self, error: BaseException | None) -> None:
        self.detach()
        label = self._label
        if error is None:
            code = None
        else:  # anything but the protocol's errors is the server's
            code = error.code if isinstance(error, InferplexError) else ErrorCode.INTERNAL
        # the span is in error where the server failed (HTTP's 5xx), not where it refused
        message = None
        if error is not None and code in _SERVER_ERRORS:
            message = f"{type(error).__name__}: {error}"
        self._span.end((label.status_key, label.status(code)), message)


#: the errors that are the server's, not the caller's (HTTP answers them 5xx)
_SERVER_ERRORS = frozenset(
    (
        ErrorCode.INTERNAL,
        ErrorCode.UNAVAILABLE,
        ErrorCode.DEADLINE_EXCEEDED,
        ErrorCode.UNIMPLEMENTED,
    )
)
