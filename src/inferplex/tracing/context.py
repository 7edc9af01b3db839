"""What the data path touches for tracing: the on/off switch and the per-request record.

Off (the default), the data path reads one bool per request and per batch. On, the frontend
puts a :class:`RequestTrace` in a context variable; the model version notes its queue and
batch times in it (plain integer stores); the frontend turns the record into spans once the
response is sent, so no OpenTelemetry call happens between receiving and answering.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


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
