"""The clocks of an HTTP/2 connection (transport/http2_deadlines.py), sans I/O: asked what is
due at a given time, with no connection, loop or timer."""

from __future__ import annotations

import math

from inferplex.transport.http2_deadlines import Deadlines
from inferplex.transport.http2_limits import Http2Limits
from inferplex.transport.http2_stream import Stream


def _clocks(**limits: float) -> Deadlines:
    deadlines = Deadlines(Http2Limits(**limits))  # type: ignore[arg-type]
    deadlines.start(100.0)
    return deadlines


def test_no_preface_in_time_ends_the_connection() -> None:
    clocks = _clocks(preface_timeout_s=10, idle_timeout_s=0, keepalive_s=0)
    due = clocks.check(105, 1, False, [], [])
    assert due.end is None and due.wake == 110
    due = clocks.check(110, 1, False, [], [])
    assert due.limit == "preface_timeout" and due.end is not None


def test_a_silent_peer_is_pinged_then_dropped_and_a_peer_that_reads_is_not() -> None:
    clocks = _clocks(idle_timeout_s=0, keepalive_s=20, keepalive_timeout_s=5)
    assert clocks.check(110, 0, True, [], []).wake == 120
    due = clocks.check(120, 0, True, [], [])
    assert due.ping and due.wake == 125
    assert not clocks.check(124, 1, True, [], []).ping  # it answered: quiet again from 124
    assert clocks.check(144, 1, True, [], []).ping
    due = clocks.check(149, 1, True, [], [])
    assert due.limit == "keepalive_timeout" and not due.ping


def test_idle_counts_from_the_last_read_or_answer() -> None:
    clocks = _clocks(idle_timeout_s=30, keepalive_s=0)
    busy = Stream(1, [], 65535, 65535)
    busy.remote_closed = True  # its request is in: the server works on it
    assert clocks.check(200, 0, True, [busy], []).wake == 230
    assert clocks.check(229, 0, True, [], []).end is None
    due = clocks.check(230, 0, True, [], [])
    assert due.limit == "idle_timeout"


def test_the_maximum_age_closes_gracefully_then_ends_after_its_grace() -> None:
    clocks = _clocks(
        idle_timeout_s=0, keepalive_s=0, max_connection_age_s=50, max_connection_age_grace_s=10
    )
    assert clocks.check(149, 0, True, [], []).wake == 150
    due = clocks.check(150, 0, True, [], [])
    assert due.goaway and due.end is None and due.wake == 160
    assert not clocks.check(155, 0, True, [], []).goaway  # once
    due = clocks.check(160, 0, True, [], [])
    assert due.end == "maximum connection age reached" and due.limit is None


def test_sends_stalled_past_the_send_timeout() -> None:
    clocks = _clocks(idle_timeout_s=0, keepalive_s=0, send_timeout_s=15)
    stalled, moving = Stream(1, [], 0, 65535), Stream(3, [], 0, 65535)
    stalled.stalled_since, moving.stalled_since = 100.0, 110.0
    due = clocks.check(115, 0, True, [stalled, moving], [stalled, moving])
    assert due.cancel == [stalled] and due.wake == 125 and not due.abort
    clocks.paused_at = 112.0
    assert clocks.check(127, 0, True, [], []).abort
    assert _clocks(idle_timeout_s=0, keepalive_s=0).check(1e9, 0, True, [], []).wake == math.inf
