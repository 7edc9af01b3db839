"""What the data path touches for tracing: the on/off switch and the per-request record.

Off (the default), the data path reads one bool per request and per batch. On, a frontend
gives each inference call a :class:`CallTrace` (the caller's trace context); the data plane
opens the call's server span through a :class:`CallTracer` and puts its
:class:`RequestTrace` in a context variable; the model version notes its queue and batch
times in it (plain integer stores); the span's children are made of the record once the
call is answered, so no OpenTelemetry call happens between receiving and answering.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol


class _Switch:
    __slots__ = ("enabled",)

    def __init__(self) -> None:
        self.enabled = False


#: True while a tracer is configured (tracing/setup.py switches it)
TRACING = _Switch()


@dataclass(slots=True)
class RequestTrace:
    """Timestamps (``time.perf_counter_ns``) of one request's way through the server."""

    request_id: str = ""
    model: str = ""
    version: str = ""
    received_ns: int = 0  # the whole body has arrived
    enqueued_ns: int = 0
    began_ns: int = 0  # its batch started on an instance
    prepared_ns: int = 0
    executed_ns: int = 0
    ended_ns: int = 0
    batch_rows: int = 0
    batch_requests: int = 0
    instance: str = ""

    def queued(self, model: str, version: str, request_id: str, now_ns: int) -> None:
        self.model, self.version, self.request_id, self.enqueued_ns = (
            model,
            version,
            request_id,
            now_ns,
        )

    def batch(
        self,
        began: int,
        prepared: int,
        executed: int,
        ended: int,
        rows: int,
        requests: int,
        instance: str,
    ) -> None:
        self.began_ns, self.prepared_ns, self.executed_ns, self.ended_ns = (
            began,
            prepared,
            executed,
            ended,
        )
        self.batch_rows, self.batch_requests, self.instance = rows, requests, instance


#: the record of the request the current task serves (None: not traced)
CURRENT: ContextVar[RequestTrace | None] = ContextVar("inferplex_request_trace", default=None)


@dataclass(slots=True)
class CallTrace:
    """The trace a call continues, as its frontend read it (made only while tracing is on):
    the W3C ``traceparent`` / ``tracestate`` it came with (lower-case keys), when its first
    byte arrived (``time.perf_counter_ns``; 0: when the data plane took it), and, once the
    data plane opened a sampled server span for it, that span's ``traceparent`` for the
    answer (a frontend that can, sends it back)."""

    carrier: dict[str, str]
    received_ns: int = 0
    traceparent: str = ""


class CallSpan(Protocol):
    """The server span of one call, open while the data plane serves it."""

    record: RequestTrace

    def end(self, status: tuple[str, int], error: str | None) -> None:
        """Close it with the call's status attribute (key, value) and error, if any."""
        ...


class CallTracer(Protocol):
    """Opens calls' server spans (``tracing/calls.py``, with OpenTelemetry)."""

    def start(self, name: str, attributes: dict[str, Any], trace: CallTrace) -> CallSpan | None:
        """The span of a call (None when it is not sampled); sets ``trace.traceparent``."""
        ...
