"""Families of the HTTP/1.1 listeners: the requests they answered themselves (a limit, a
malformed request, a refused admission), open connections and buffered request bytes.

Read at scrape time from the counters each ``transport.http_server.HttpServer`` keeps; the
listeners do nothing per request for them beyond those counters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Protocol

from inferplex.metrics.exposition import Family


class Budget(Protocol):
    @property
    def used(self) -> int: ...


class Listener(Protocol):
    """What a listener exposes (``HttpServer`` has these attributes)."""

    @property
    def refusals(self) -> Mapping[str, int]: ...
    @property
    def send_timeouts(self) -> int: ...
    @property
    def connections(self) -> Sized: ...
    @property
    def budget(self) -> Budget: ...


def listener_families(listeners: Sequence[Listener]) -> list[Family]:
    refusals = Family(
        "inferplex_http_refusals",
        "counter",
        "HTTP/1.1 requests the server answered itself, by reason: a limit (uri_too_long, "
        "header_too_large, body_too_large, header_timeout, body_timeout, server_buffer_full), "
        "malformed, missing_host, http_version, or admission (route, method or token refused "
        "before the body was read)",
    )
    send_timeouts = Family(
        "inferplex_http_send_timeouts",
        "counter",
        "HTTP/1.1 connections dropped because the client did not read its answer",
    )
    connections = Family("inferplex_http_connections", "gauge", "Open HTTP/1.1 connections")
    buffered = Family(
        "inferplex_http_buffered_bytes",
        "gauge",
        "Request bytes held server-wide (--max-buffered-bytes): bodies until answered, "
        "large decodes, answers waiting for a client",
    )
    counts: dict[str, int] = {}
    budgets: dict[int, Budget] = {}
    for listener in listeners:
        for reason, count in listener.refusals.items():
            counts[reason] = counts.get(reason, 0) + count
        budgets[id(listener.budget)] = listener.budget  # one budget may serve several
    for reason, count in counts.items():
        refusals.add({"reason": reason}, count)
    send_timeouts.add({}, sum(listener.send_timeouts for listener in listeners))
    connections.add({}, sum(len(listener.connections) for listener in listeners))
    buffered.add({}, sum(budget.used for budget in budgets.values()))
    return [refusals, send_timeouts, connections, buffered]
