"""Closed-loop and open-loop load, measured in windows until stable.

A *stream* is one model's load at one level: ``concurrency`` clients each sending the next
request as soon as the previous answer arrived (closed loop), or requests started every
``1 / rate`` seconds whatever the answers (open loop: latency not inflated by the client's
own queueing). Several streams run together when models are benchmarked side by side.

:func:`measure` runs the streams for ``warmup`` seconds unrecorded, then in windows of
``window`` seconds until every stream is stable (:func:`~inferplex_tools.benchtool.stats.is_stable`)
or ``max_windows`` were taken. The result of each stream is its last ``stable_count``
windows. Any failed request stops the measurement with :class:`RequestFailed`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from inferplex_tools.benchtool.clients import InferClient, RequestFailed
from inferplex_tools.benchtool.stats import Window, is_stable

Mode = Literal["concurrency", "rate"]

#: open loop: requests in flight beyond which new sends are skipped (and counted); over HTTP
#: each one holds a connection, so this also bounds the open sockets (a 1024 fd limit is common)
MAX_IN_FLIGHT = 512
#: seconds a stopping stream waits for its requests in flight
DRAIN_SECONDS = 30.0


@dataclass
class Stream:
    """One model's load at one level, and what was measured of it."""

    name: str
    client: InferClient
    mode: Mode
    level: float
    windows: list[Window] = field(default_factory=list)
    skipped: int = 0
    """open loop: sends skipped because MAX_IN_FLIGHT requests were still unanswered"""
    sent: int = 0
    _latencies: list[int] = field(default_factory=list, repr=False)
    _recording: bool = field(default=False, repr=False)

    def _take(self) -> list[int]:
        taken, self._latencies = self._latencies, []
        return taken

    def record(self, latency_ns: int) -> None:
        if self._recording:
            self._latencies.append(latency_ns)


@dataclass(frozen=True)
class Outcome:
    """How a measurement ended: stable or not, the windows taken, the windows used."""

    stable: bool
    windows: int
    used: int

    @property
    def first_used(self) -> int:
        """Index of the window boundary where the used windows begin (0 = end of warm-up)."""
        return self.windows - self.used


async def measure(
    streams: Sequence[Stream],
    *,
    warmup: float,
    window: float,
    stability: float,
    max_windows: int,
    stable_count: int = 3,
    on_window: Callable[[int], Awaitable[None]] | None = None,
) -> Outcome:
    """Run the streams together; ``on_window(k)`` is awaited at boundary k (0 = warm-up end)."""
    if window <= 0 or max_windows < 1 or warmup < 0:
        raise ValueError("window must be > 0 s, max_windows >= 1 and warmup >= 0 s")
    state = {"stop": False}
    tasks = await _start(streams, state)
    try:
        if warmup:
            await _run_for(tasks, warmup)
        for stream in streams:
            stream._recording = True
            stream._take()
        if on_window is not None:
            await on_window(0)
        stable = False
        start = time.perf_counter()
        for index in range(1, max_windows + 1):
            await _run_for(tasks, window)
            now = time.perf_counter()
            for stream in streams:
                stream.windows.append(Window(stream._take(), now - start))
            start = now
            if on_window is not None:
                await on_window(index)
            stable = all(is_stable(s.windows, stability, stable_count) for s in streams)
            if stable:
                break
        state["stop"] = True
        await _drain(tasks)
    finally:
        for task in tasks:
            task.cancel()
    taken = len(streams[0].windows) if streams else 0
    return Outcome(stable, taken, min(stable_count, taken))


async def _start(streams: Sequence[Stream], state: dict) -> list[asyncio.Task[None]]:
    """The tasks that put the streams' load on: one per client of a closed loop, one per
    open loop."""
    tasks: list[asyncio.Task[None]] = []
    for stream in streams:
        if stream.mode == "concurrency":
            for _ in range(int(stream.level)):
                send = await stream.client.lane()
                tasks.append(asyncio.create_task(_closed(stream, send, state)))
        else:
            tasks.append(asyncio.create_task(_open(stream, state)))
    return tasks


async def _closed(stream: Stream, send: Callable[[], Awaitable[object]], state: dict) -> None:
    clock = time.perf_counter_ns
    while not state["stop"]:
        start = clock()
        await send()
        stream.record(clock() - start)


async def _open(stream: Stream, state: dict) -> None:
    """Start a request every 1/rate s on fixed times; a slow answer delays no later send."""
    if stream.level <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {stream.level}")
    pending: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []
    client = stream.client

    async def one() -> None:
        start = time.perf_counter_ns()
        await client.call()
        stream.record(time.perf_counter_ns() - start)

    def finished(task: asyncio.Task[None]) -> None:
        pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]

    interval = 1.0 / stream.level
    begin = time.perf_counter()
    count = 0
    try:
        while not state["stop"]:
            if failures:
                raise failures[0]
            delay = begin + count * interval - time.perf_counter()
            # behind schedule: still yield, so answers are read between bursts of sends
            await asyncio.sleep(max(delay, 0.0))
            count += 1
            if len(pending) >= MAX_IN_FLIGHT:
                stream.skipped += 1
                continue
            task = asyncio.create_task(one())
            pending.add(task)
            task.add_done_callback(finished)
            stream.sent += 1
        await _settle(pending, failures)
    finally:
        for task in pending:
            task.cancel()


async def _settle(pending: set[asyncio.Task[None]], failures: list[BaseException]) -> None:
    """An open loop has stopped sending: wait for its requests in flight, and re-raise the
    first failure."""
    if pending:
        await asyncio.wait(set(pending), timeout=DRAIN_SECONDS)
    if failures:
        raise failures[0]


async def _run_for(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """Let the load run for ``seconds``; re-raise the first failure at once."""
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        task.result()


async def _drain(tasks: list[asyncio.Task[None]]) -> None:
    if not tasks:
        return
    done, _ = await asyncio.wait(tasks, timeout=DRAIN_SECONDS)
    for task in done:
        if not task.cancelled() and isinstance(task.exception(), RequestFailed):
            task.result()
