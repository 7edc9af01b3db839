"""Families of the HTTP/1.1 listeners: the requests they answered themselves (a limit, a
malformed request, a refused admission), open connections and buffered request bytes; and
of the connection gate every listener accepts through (connections open and refused).

Read at scrape time from the counters each ``transport.http_server.HttpServer`` keeps; the
listeners do nothing per request for them beyond those counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from inferplex.metrics.exposition import Family
from inferplex.transport.connections import ConnectionGate
from inferplex.transport.http_limits import ByteBudget
from inferplex.transport.interface import HttpServing


def listener_families(listeners: Sequence[HttpServing]) -> list[Family]:
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
    budgets: dict[int, ByteBudget] = {}
    gates: dict[int, ConnectionGate] = {}
    for listener in listeners:
        for reason, count in listener.refusals.items():
            counts[reason] = counts.get(reason, 0) + count
        budgets[id(listener.budget)] = listener.budget  # one budget may serve several
        gates[id(listener.gate)] = listener.gate  # and one gate all of them
    for reason, count in counts.items():
        refusals.add({"reason": reason}, count)
    send_timeouts.add({}, sum(listener.send_timeouts for listener in listeners))
    connections.add({}, sum(len(listener.connections) for listener in listeners))
    buffered.add({}, sum(budget.used for budget in budgets.values()))
    return [refusals, send_timeouts, connections, buffered, *_gate_families(gates.values())]


def _gate_families(gates: Iterable[ConnectionGate]) -> list[Family]:
    refused = Family(
        "inferplex_connections_refused",
        "counter",
        "Connections closed as they were accepted, on any listener (HTTP, management, "
        "metrics, gRPC), by reason: server (max_connections) or peer "
        "(max_connections_per_peer)",
    )
    open_ = Family(
        "inferplex_connections_open",
        "gauge",
        "Connections open on all listeners together, TLS handshakes included",
    )
    counts: dict[str, int] = {}
    total = 0
    for gate in gates:
        total += gate.open
        for reason, count in gate.refused.items():
            counts[reason] = counts.get(reason, 0) + count
    for reason, count in counts.items():
        refused.add({"reason": reason}, count)
    open_.add({}, total)
    return [refused, open_]
