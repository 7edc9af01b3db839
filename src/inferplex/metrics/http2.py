"""Families of the gRPC port's HTTP/2 transport: each limit a client ran into, open
connections and request bytes buffered.

Read at scrape time from the ``Http2Counters`` the built-in gRPC server keeps; connections
do nothing for them beyond those counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from inferplex.metrics.exposition import Family

#: every limit, so each has a series (0 until first reached): transport/http2_limits.py
LIMITS = (
    "header_frames",
    "header_block_bytes",
    "settings_entries",
    "resets",
    "control_frames",
    "concurrent_streams",
    "preface_timeout",
    "idle_timeout",
    "keepalive_timeout",
    "max_connection_age",
    "send_timeout",
    "connection_buffer",
    "connection_buffer_waits",
    "server_buffer",
    "flow_control",
    "message_size",
)


class Http2Counts(Protocol):
    """What the transport exposes (``transport.http2_limits.Http2Counters``)."""

    @property
    def exceeded(self) -> Mapping[str, int]: ...
    @property
    def connections(self) -> int: ...
    @property
    def buffered(self) -> int: ...


def http2_families(counters: Http2Counts | None) -> list[Family]:
    if counters is None:
        return []
    exceeded = Family(
        "inferplex_http2_limit_exceeded",
        "counter",
        "Times a gRPC (HTTP/2) client ran into a limit, by limit: header_frames, "
        "header_block_bytes, settings_entries, resets, control_frames (GOAWAY "
        "ENHANCE_YOUR_CALM); concurrent_streams (REFUSED_STREAM); preface_timeout, "
        "idle_timeout, keepalive_timeout, max_connection_age (GOAWAY, close); send_timeout "
        "(RST_STREAM CANCEL); connection_buffer, server_buffer (RESOURCE_EXHAUSTED); "
        "flow_control (FLOW_CONTROL_ERROR); message_size (a request message above its "
        "method's limit, compressed or inflated: RESOURCE_EXHAUSTED)",
    )
    for limit in LIMITS:
        exceeded.add({"limit": limit}, counters.exceeded.get(limit, 0))
    connections = Family("inferplex_http2_connections", "gauge", "Open gRPC (HTTP/2) connections")
    connections.add({}, counters.connections)
    buffered = Family(
        "inferplex_http2_buffered_bytes",
        "gauge",
        "Request bytes the gRPC port buffers in messages not received whole",
    )
    buffered.add({}, counters.buffered)
    return [exceeded, connections, buffered]
