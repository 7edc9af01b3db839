"""Load generation with a cheap client: closed loop and open loop.

``measure`` runs one coroutine per simulated client, each sending its next request as soon as
the previous answer arrived (concurrency = number of clients), and records latencies only
inside a measurement window that opens after a warm-up. ``measure_open`` sends at a fixed rate
whatever the answers, so the latency it records is not inflated by its own queueing (for a
model driven at a modest rate while another floods the server). The clients are cheap on
purpose: on a 2-core machine a heavy client steals the server's CPU and distorts every figure.

- HTTP: one raw keep-alive socket per client (a bare asyncio protocol), writing pre-encoded
  request bytes and reading the response by its Content-Length.
- gRPC: one raw HTTP/2 connection per client (``grpc_call``, on ``GrpcConnection``: about
  100 µs of client CPU per 600 KB request where grpc.aio takes about 350), each call's frames
  encoded once, the answer left as bytes; ``benchtool.clients.grpc_infer`` gives grpc.aio,
  to compare.
- Open loop over HTTP: a ``benchtool.clients.HttpPool`` of keep-alive connections, one per
  request in flight, opened on demand.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import numpy as np

from inferplex_tools.benchtool.clients import MODEL_INFER, HttpConnection
from inferplex_tools.benchtool.grpc_wire import GrpcConnection

#: One request: sends it and returns what is needed to check the answer.
Call = Callable[[], Awaitable[Any]]


@dataclass
class Measurement:
    """Requests completed inside the window, their latencies, and the CPU time the server
    process and this (client) process spent meanwhile."""

    seconds: float
    latencies_ns: list[int] = field(repr=False)
    server_cpu_seconds: float | None = None
    client_cpu_seconds: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    """figures a benchmark adds about the same window (e.g. the server's batch statistics)"""

    @property
    def requests(self) -> int:
        return len(self.latencies_ns)

    @property
    def rate(self) -> float:
        """Completed requests per second."""
        return self.requests / self.seconds

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_ns:
            return float("nan")
        return float(np.percentile(self.latencies_ns, q)) / 1e6

    def per_request_us(self, cpu_seconds: float | None) -> float | None:
        if cpu_seconds is None or not self.requests:
            return None
        return cpu_seconds / self.requests * 1e6

    def summary(self) -> dict[str, float | int | None]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate, 1),
            "p50_ms": round(self.percentile_ms(50), 4),
            "p99_ms": round(self.percentile_ms(99), 4),
            "server_cpu_us_per_request": _rounded(self.per_request_us(self.server_cpu_seconds)),
            "client_cpu_us_per_request": _rounded(self.per_request_us(self.client_cpu_seconds)),
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


async def measure(
    calls: Sequence[Call],
    duration: float,
    warmup: float,
    server_cpu: Callable[[], float] | None = None,
) -> Measurement:
    """Drive every call in its own closed loop; measure ``duration`` seconds after ``warmup``.

    ``server_cpu`` reads the server's CPU time (user + system), sampled at the window's
    edges, as is this process's own. Any failed request stops the run with its exception.
    """
    latencies: list[int] = []
    window = {"open": False, "stop": False}

    async def client(call: Call) -> None:
        clock = time.perf_counter_ns
        record = latencies.append
        while not window["stop"]:
            start = clock()
            await call()
            if window["open"]:
                record(clock() - start)

    tasks = [asyncio.create_task(client(call)) for call in calls]
    try:
        await _run_for(tasks, warmup)
        server_before = server_cpu() if server_cpu else 0.0
        client_before = time.process_time()
        start = time.perf_counter()
        window["open"] = True
        await _run_for(tasks, duration)
        window["open"] = False
        elapsed = time.perf_counter() - start
        client_used = time.process_time() - client_before
        server_used = server_cpu() - server_before if server_cpu else None
        window["stop"] = True
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return Measurement(elapsed, latencies, server_used, client_used)


async def measure_open(call: Call, rate: float, duration: float, warmup: float) -> Measurement:
    """Open loop: start ``call`` every ``1 / rate`` seconds whether or not the earlier ones were
    answered; record the latency of every request sent inside the window (after ``warmup``).

    The sending times are fixed in advance, so a slow answer delays no later request and the
    latencies are the server's, not queueing in the client. Any failed request stops the run.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate}")
    run = _OpenLoop(call)
    begin = time.perf_counter()
    try:
        await run.send(rate, begin, begin + warmup, begin + warmup + duration)
        if run.pending:
            await asyncio.wait(set(run.pending))
    finally:
        for task in run.pending:
            task.cancel()
    if run.failures:
        raise run.failures[0]
    return Measurement(duration, run.latencies)


class _OpenLoop:
    """The requests of one open-loop run: those in flight, the latencies of those sent in
    the window, and the failures (the first stops the sending)."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.latencies: list[int] = []
        self.failures: list[BaseException] = []
        self.pending: set[asyncio.Task[None]] = set()

    async def send(self, rate: float, begin: float, opens: float, closes: float) -> None:
        """Start a request every ``1 / rate`` seconds from ``begin`` until ``closes``; those
        started from ``opens`` on are recorded."""
        sent = 0
        while not self.failures:
            at = begin + sent / rate
            if at >= closes:
                return
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._one(at >= opens))
            self.pending.add(task)
            task.add_done_callback(self._finished)
            sent += 1

    async def _one(self, recorded: bool) -> None:
        start = time.perf_counter_ns()
        await self.call()
        if recorded:
            self.latencies.append(time.perf_counter_ns() - start)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(cast(BaseException, task.exception()))


async def _run_for(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """Let the clients run for ``seconds``; re-raise the first client failure at once."""
    done, _ = await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        task.result()


async def open_http(host: str, port: int, count: int) -> list[HttpConnection]:
    return [await HttpConnection.open(host, port) for _ in range(count)]


async def grpc_call(host: str, port: int, request: bytes) -> tuple[GrpcConnection, Call]:
    """A raw HTTP/2 connection and a call sending it the serialised ModelInferRequest
    ``request``, returning the answer's bytes."""
    connection = await GrpcConnection.open(host, port)
    return connection, partial(connection.call, connection.request(MODEL_INFER, request))


def measure_threads(
    call: Callable[[], object], concurrency: int, duration: float, warmup: float
) -> Measurement:
    """Like ``measure``, for blocking calls (in-process ONNX Runtime) on plain threads,
    which is how an application would call a session that releases the GIL."""
    latencies: list[int] = []
    window = {"open": False}
    stop = threading.Event()
    errors: list[BaseException] = []

    def client() -> None:
        clock = time.perf_counter_ns
        try:
            while not stop.is_set():
                start = clock()
                call()
                if window["open"]:
                    latencies.append(clock() - start)
        except BaseException as error:
            errors.append(error)
            stop.set()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    stop.wait(warmup)
    start = time.perf_counter()
    window["open"] = True
    stop.wait(duration)
    window["open"] = False
    elapsed = time.perf_counter() - start
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return Measurement(elapsed, latencies)
