"""The SUT between LoadGen's thread and the client loop, with a fake LoadGen and client: every
sample is completed (failed ones too), failures are counted, issuing never waits for answers."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from inferplex_tools.benchtool.clients import InferClient, RequestFailed, Send
from inferplex_tools.benchtool.mlperf_sut import LoopThread, Sut

#: a generous deadline for the loop thread to answer (never reached when it works)
DEADLINE = 30.0


class HeldClient(InferClient):
    """Answers once released; every third request fails. Notes the most requests in flight
    and says when ``busy`` requests are in flight at once."""

    def __init__(self, busy: int) -> None:
        self.release = asyncio.Event()  # bound to the loop at its first wait
        self.busy = threading.Event()
        self._busy_at = busy
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def call(self) -> bytes:
        self.calls += 1
        number = self.calls
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight == self._busy_at:
            self.busy.set()
        await self.release.wait()
        self.in_flight -= 1
        if number % 3 == 0:
            raise RequestFailed(f"HTTP/1.1 500 Internal Server Error: request {number}")
        return b""

    async def lane(self) -> Send:
        return self.call

    async def close(self) -> None:
        pass


class FakeLoadGen:
    """QuerySampleResponse / QuerySamplesComplete, recording the completed sample ids."""

    def __init__(self, expected: int) -> None:
        self.completed: list[int] = []
        self.threads: set[str] = set()
        self.all_done = threading.Event()
        self._expected = expected
        self.QuerySampleResponse = lambda sample_id, data, size: (sample_id, data, size)
        self.QuerySamplesComplete = self._complete

    def _complete(self, responses: list[tuple[int, int, int]]) -> None:
        self.threads.add(threading.current_thread().name)
        self.completed += [sample_id for sample_id, _, _ in responses]
        if len(self.completed) == self._expected:
            self.all_done.set()


def samples(ids: range) -> list[Any]:
    return [SimpleNamespace(id=i, index=i % 7) for i in ids]


def test_every_sample_is_completed_from_the_loop_and_failures_counted() -> None:
    lg = FakeLoadGen(expected=20)
    client = HeldClient(busy=4)
    with LoopThread() as loop:
        sut = Sut(lg, client, loop.loop, max_in_flight=4)
        # this thread plays LoadGen's: both calls return with every request still unanswered
        sut.issue_queries(samples(range(10)))
        sut.issue_queries(samples(range(10, 20)))
        sut.flush_queries()
        assert client.busy.wait(DEADLINE)  # the loop sent 4 and holds the other 16
        assert lg.completed == []
        loop.loop.call_soon_threadsafe(client.release.set)
        assert lg.all_done.wait(DEADLINE)
    assert sorted(lg.completed) == list(range(20))
    assert lg.threads == {"mlperf-client"}
    assert client.most_in_flight == 4
    assert sut.errors == 6  # requests 3, 6, ..., 18
    assert sut.first_error.startswith("HTTP/1.1 500 Internal Server Error: request ")


class SilentClient(HeldClient):
    """Never answers (a server that stopped)."""

    async def call(self) -> bytes:
        await asyncio.Event().wait()
        return b""


def test_an_unanswered_request_fails_after_the_timeout() -> None:
    lg = FakeLoadGen(expected=2)
    with LoopThread() as loop:
        sut = Sut(lg, SilentClient(busy=0), loop.loop, max_in_flight=2, timeout=0.01)
        sut.issue_queries(samples(range(2)))
        assert lg.all_done.wait(DEADLINE)
    assert sorted(lg.completed) == [0, 1]
    assert (sut.errors, sut.first_error) == (2, "no answer in 0.01 s")
