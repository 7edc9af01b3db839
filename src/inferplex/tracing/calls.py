"""The server spans of inference calls, opened by the data plane (``dataplane/plane.py``)
for every protocol alike: REST, gRPC ModelInfer and ModelStreamInfer (a span per request of
the stream), Triton's generate endpoints and the OpenAI-compatible API. Loaded only while
tracing is on.

A call continues the trace of the W3C ``traceparent`` it came with (an HTTP header, gRPC
metadata); a sampled call's span names itself back in ``CallTrace.traceparent`` for the
frontend to send with the answer.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.trace import Tracer

from inferplex.tracing.context import CallTrace, RequestTrace
from inferplex.tracing.spans import RequestSpans, parent_context, traceparent


class CallSpans:
    """A :class:`~inferplex.tracing.context.CallTracer` on an OpenTelemetry tracer."""

    __slots__ = ("_tracer",)

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def start(self, name: str, attributes: dict[str, Any], trace: CallTrace) -> _Span | None:
        # from the call's first byte, when its frontend saw it: "receive" shows the wait
        # for the rest
        spans = RequestSpans(
            self._tracer, name, parent_context(trace.carrier), attributes, trace.received_ns
        )
        if not spans.sampled:
            spans.span.end()
            return None
        spans.record.received_ns = time.perf_counter_ns()
        trace.traceparent = traceparent(spans.span)
        return _Span(spans)


class _Span:
    __slots__ = ("_spans", "record")

    def __init__(self, spans: RequestSpans) -> None:
        self._spans = spans
        self.record: RequestTrace = spans.record

    def end(self, status: tuple[str, int], error: str | None) -> None:
        self._spans.span.set_attribute(*status)
        record = self.record
        if record.model:
            self._spans.span.set_attribute("inferplex.model.name", record.model)
        self._spans.finish(error)
