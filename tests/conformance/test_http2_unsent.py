"""Answers a client does not read are charged to the server-wide byte budget while they wait
for its flow-control windows, and a connection whose waiting answers pass
``--http2-connection-buffer-bytes`` gets no new calls (RESOURCE_EXHAUSTED naming the limit)
until they leave, once they stand still (issue 30: a zero-window client with 200 x 1 MB
answers held ~500 MB); a client that reads them, if slowly, is never refused."""

from __future__ import annotations

import time

from inferplex.transport.http2_flow import ANSWERS_STALL_S
from inferplex.transport.http2_limits import Http2Limits
from tests.support.h2raw import ECHO, INITIAL_WINDOW_SIZE, TIMEOUT, Conn, serving

ANSWER = 60_000  # within a stream's initial window (64 KiB): sent without waiting
RESOURCE_EXHAUSTED = 8


def test_unread_answers_are_charged_and_stop_new_calls() -> None:
    limits = Http2Limits(connection_buffer_bytes=1 << 20)
    with serving(limits) as served:
        budget = served.server.counters.budget

        def used() -> int:
            return int(served.run(lambda: budget.used))

        with Conn(served.port) as conn:
            conn.handshake((INITIAL_WINDOW_SIZE, 0))  # the client takes no DATA at all
            streams = range(1, 41, 2)  # 20 x 60 KB: past the connection's 1 MiB
            for stream_id in streams:
                conn.send(conn.call(stream_id, ECHO, b"x" * ANSWER))
            deadline = time.monotonic() + TIMEOUT
            while used() < len(streams) * ANSWER:
                assert time.monotonic() < deadline, f"only {used()} bytes charged"
                time.sleep(0.01)
            # 1.2 MB waiting, past the connection's 1 MiB: once they have stood still for
            # ANSWERS_STALL_S (the client reads nothing), the next call is refused
            time.sleep(ANSWERS_STALL_S + 0.1)
            conn.send(conn.call(41, ECHO, b"y"))
            assert conn.grpc_status(41) == RESOURCE_EXHAUSTED
            refused = [f for f in conn.received if f.stream_id == 41]
            assert any(b"INFERPLEX_HTTP2_CONNECTION_BUFFER_BYTES" in f.payload for f in refused)
        # the client went away: every byte it held is given back
        deadline = time.monotonic() + TIMEOUT
        while used():
            assert time.monotonic() < deadline, f"{used()} bytes kept after the connection"
            time.sleep(0.01)
