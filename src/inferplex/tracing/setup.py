"""Switching tracing on: a tracer provider of our own (the global one is left to the
embedding application), a parent-based ratio sampler and a console or OTLP/HTTP exporter."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Tracer

from inferplex.tracing.calls import CallSpans
from inferplex.tracing.context import TRACING
from inferplex.version import __version__

logger = logging.getLogger(__name__)

Exporter = Literal["console", "otlp"]


@dataclass
class Tracing:
    """A configured tracer; ``shutdown`` flushes the spans still buffered."""

    provider: TracerProvider
    tracer: Tracer

    def calls(self) -> CallSpans:
        """What opens inference calls' server spans (the data plane's tracer)."""
        return CallSpans(self.tracer)

    def shutdown(self) -> None:
        TRACING.enabled = False
        self.provider.shutdown()


def configure_tracing(
    rate: float,
    exporter: Exporter = "otlp",
    endpoint: str = "",
    service_name: str = "inferplex",
    span_exporter: SpanExporter | None = None,
) -> Tracing:
    """Sample ``rate`` of the requests that arrive without a sampled parent (a parent's
    decision is kept); export to ``span_exporter`` if given (embedding, tests), else to the
    console or to OTLP/HTTP at ``endpoint`` (the exporter's default when empty)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"trace rate must be in (0, 1], got {rate}")
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name, "service.version": __version__}),
        sampler=ParentBased(TraceIdRatioBased(rate)),
    )
    processor: Any
    if span_exporter is not None:
        processor = SimpleSpanProcessor(span_exporter)
    elif exporter == "console":
        processor = BatchSpanProcessor(ConsoleSpanExporter())
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or None))
    provider.add_span_processor(processor)
    tracing = Tracing(provider, provider.get_tracer("inferplex", __version__))
    TRACING.enabled = True
    logger.info(
        "tracing %.0f%% of requests to %s",
        rate * 100,
        "the given exporter" if span_exporter else (endpoint or exporter),
    )
    return tracing
