"""Turning a request's :class:`RequestTrace` into spans, once it is answered.

Spans of one request (children of the frontend's server span)::

    POST /v2/models/{m}/infer   (SERVER; or ModelInfer, ModelStreamInfer, ...)  whole call
      receive                   first byte to the data plane taking the call
      queue                     queued until its batch began on an instance
      execute                   the batch: concatenate, run, split (rows, requests, instance)
      response                  batch done until the answer was encoded (a stream: its end)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from inferplex.tracing.context import RequestTrace

_PROPAGATOR = TraceContextTextMapPropagator()


def parent_context(carrier: Mapping[str, str]) -> Context:
    """The remote parent of W3C ``traceparent`` / ``tracestate`` (lower-case keys), if any."""
    return _PROPAGATOR.extract(carrier)


def traceparent(span: Span) -> str:
    """The W3C ``traceparent`` value naming ``span``."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


class RequestSpans:
    """The server span of one request, opened when it arrives; children are added at the end."""

    __slots__ = ("_offset", "_tracer", "record", "span", "start_ns")

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        parent: Context,
        attributes: dict[str, Any],
        start_ns: int = 0,
    ) -> None:
        """``start_ns``: when the request began (``time.perf_counter_ns``; 0: now)."""
        self._tracer = tracer
        self.start_ns = start_ns or time.perf_counter_ns()
        # perf_counter for intervals, wall clock for export: one offset per request
        self._offset = time.time_ns() - self.start_ns
        self.span = tracer.start_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            start_time=self.start_ns + self._offset,
            attributes=attributes,
        )
        self.record = RequestTrace()

    @property
    def sampled(self) -> bool:
        return self.span.is_recording()

    def _child(self, name: str, start: int, end: int, attributes: dict[str, object]) -> None:
        if not start or end < start:
            return
        span = self._tracer.start_span(
            name,
            context=trace.set_span_in_context(self.span),
            start_time=start + self._offset,
            attributes=attributes,  # type: ignore[arg-type]
        )
        span.end(end + self._offset)

    def finish(self, error: str | None = None, sent_ns: int = 0) -> None:
        """Add the children from the record and end the server span at ``sent_ns`` (now)."""
        record = self.record
        end = sent_ns or time.perf_counter_ns()
        self._child("receive", self.start_ns, record.received_ns, {})
        self._child("queue", record.enqueued_ns, record.began_ns, {})
        self._child(
            "execute",
            record.began_ns,
            record.ended_ns,
            {
                "inferplex.batch.rows": record.batch_rows,
                "inferplex.batch.requests": record.batch_requests,
                "inferplex.instance": record.instance,
                "inferplex.compute_input_us": (record.prepared_ns - record.began_ns) / 1e3,
                "inferplex.compute_infer_us": (record.executed_ns - record.prepared_ns) / 1e3,
                "inferplex.compute_output_us": (record.ended_ns - record.executed_ns) / 1e3,
            },
        )
        self._child("response", record.ended_ns or record.received_ns or self.start_ns, end, {})
        span = self.span
        if record.request_id:
            span.set_attribute("inferplex.request_id", record.request_id)
        if record.version:
            span.set_attribute("inferplex.model.version", record.version)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end + self._offset)
