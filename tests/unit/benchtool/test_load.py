"""Closed and open loops, windows and stability, with an in-process client that answers
after a fixed await (the load logic, not the network, is under test here)."""

from __future__ import annotations

import asyncio

import pytest

from inferplex_tools.benchtool.clients import InferClient, RequestFailed, Send
from inferplex_tools.benchtool.load import Stream, measure


class Answering(InferClient):
    """Answers every request after ``delay`` seconds; fails from request ``fail_at`` on."""

    def __init__(self, delay: float = 0.0, fail_at: int = 0) -> None:
        self.delay = delay
        self.fail_at = fail_at
        self.calls = 0
        self.lanes = 0

    async def call(self) -> bytes:
        self.calls += 1
        await asyncio.sleep(self.delay)
        if self.fail_at and self.calls >= self.fail_at:
            raise RequestFailed("HTTP/1.1 500 Internal Server Error")
        return b""

    async def lane(self) -> Send:
        self.lanes += 1
        return self.call

    async def close(self) -> None:
        pass


async def test_closed_loop_runs_one_lane_per_client_and_stops_when_stable() -> None:
    client = Answering(delay=0.002)
    stream = Stream("m", client, "concurrency", 3)
    boundaries: list[int] = []

    async def on_window(index: int) -> None:
        boundaries.append(index)

    outcome = await measure(
        [stream], warmup=0.02, window=0.1, stability=10.0, max_windows=8, on_window=on_window
    )
    assert client.lanes == 3
    # a tolerance of 1000% is met as soon as there are 3 windows with answers
    assert outcome.stable and outcome.windows == 3 and outcome.used == 3
    assert boundaries == [0, 1, 2, 3]
    assert all(w.latencies_ns for w in stream.windows)


async def test_unstable_load_stops_after_max_windows() -> None:
    stream = Stream("m", Answering(delay=0.001), "concurrency", 1)
    outcome = await measure(
        [stream], warmup=0, window=0.05, stability=0.1, max_windows=2, stable_count=3
    )
    assert not outcome.stable and outcome.windows == 2 and outcome.used == 2
    assert outcome.first_used == 0


async def test_open_loop_sends_at_the_rate() -> None:
    stream = Stream("m", Answering(delay=0.001), "rate", 200)
    await measure([stream], warmup=0, window=0.25, stability=10.0, max_windows=2, stable_count=2)
    # sends follow the clock (a late sender catches up), so they match the time measured;
    # generous bounds for a busy machine
    elapsed = sum(w.seconds for w in stream.windows)
    assert 0.5 * 200 * elapsed <= stream.sent <= 200 * elapsed + 25
    assert stream.skipped == 0


@pytest.mark.parametrize("mode,level", [("concurrency", 2), ("rate", 500)])
async def test_a_failed_request_stops_the_measurement(mode: str, level: float) -> None:
    stream = Stream("m", Answering(fail_at=5), mode, level)  # type: ignore[arg-type]
    with pytest.raises(RequestFailed, match="500"):
        await measure([stream], warmup=0, window=0.2, stability=0.1, max_windows=5)


async def test_streams_run_together() -> None:
    a, b = (
        Stream("a", Answering(0.001), "concurrency", 1),
        Stream("b", Answering(0.001), "rate", 100),
    )
    await measure([a, b], warmup=0, window=0.1, stability=10.0, max_windows=3)
    assert len(a.windows) == len(b.windows) == 3
