"""What the HTTP frontend adds to an inference call's answer: compression, as the request's
``Accept-Encoding`` asks (as Triton does), and the ``traceparent`` of the call's server span
while tracing is on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from inferplex.dataplane.codec import Headers
from inferplex.tracing.context import CallTrace
from inferplex.transport.compression import accepted, compress
from inferplex.transport.interface import StreamedBody

__all__ = ["call_trace", "compressed", "traced"]

#: an HTTP answer: status, a whole body or one sent as it comes, headers
Reply = tuple[int, bytes | StreamedBody, Headers]

#: responses compressed on the event loop up to this size; larger ones in a thread
_INLINE_CODING_BYTES = 64 << 10


async def _off_loop(function: Callable[..., bytes], data: bytes, *args: Any) -> bytes:
    """``function(data, *args)``: a large response in a thread, so the loop goes on serving."""
    if len(data) <= _INLINE_CODING_BYTES:
        return function(data, *args)
    return await asyncio.to_thread(function, data, *args)


async def compressed(reply: Reply, accept: bytes) -> Reply:
    """An inference answer compressed as its request's ``Accept-Encoding`` asks
    (Inference-Header-Content-Length still counts the uncompressed JSON)."""
    coding = accepted(accept)
    status, payload, headers = reply
    if coding is None or not isinstance(payload, bytes):
        return reply
    payload = await _off_loop(compress, payload, coding)
    return status, payload, [*headers, (b"content-encoding", coding)]


def call_trace(headers: Headers) -> CallTrace:
    """The trace context a call came with (its W3C headers), read while tracing is on."""
    carrier = {
        key.decode("latin-1"): value.decode("latin-1")
        for key, value in headers
        if key in (b"traceparent", b"tracestate")
    }
    return CallTrace(carrier, time.perf_counter_ns())


def traced(reply: Reply, trace: CallTrace) -> Reply:
    """The answer naming the call's server span, when one was sampled."""
    if not trace.traceparent:
        return reply
    status, payload, headers = reply
    return status, payload, [*headers, (b"traceparent", trace.traceparent.encode())]
