"""LoadGen's system under test: each sample LoadGen issues becomes one request of the bench's
own client (:mod:`.clients`), sent from an asyncio loop in a thread of its own.

LoadGen calls ``issue_queries`` on its own thread and times the samples itself: anything that
thread waits for delays the next scheduled sample (Server) and inflates the latency it
measures. So ``issue_queries`` only hands the samples over (``call_soon_threadsafe``); the
loop sends them, at most ``max_in_flight`` at once (the others wait in the client, and their
wait counts in LoadGen's latency, as a real client's would), and completes each with
``QuerySamplesComplete`` from the loop's thread as its answer arrives.

LoadGen knows nothing of errors: a sample whose request failed is still completed (with an
empty response, or LoadGen would wait for it forever) and counted here, and the caller marks
the run INVALID. A request unanswered after ``REQUEST_TIMEOUT`` seconds is failed the same way,
so a server that stops answering cannot hang the run.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from inferplex_tools.benchtool.clients import InferClient
from inferplex_tools.benchtool.mlperf_summary import Summary, read_summary

T = TypeVar("T")
#: samples in LoadGen's query sample library; every one is the same pre-encoded request, so
#: the count only sets how LoadGen's sample indexes repeat
QSL_SIZE = 1024
#: seconds a request may go unanswered before it counts as failed
REQUEST_TIMEOUT = 60.0


class LoopThread:
    """An event loop (uvloop) running in a daemon thread until :meth:`close`."""

    def __init__(self) -> None:
        import uvloop

        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="mlperf-client", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class Sut:
    """LoadGen's SUT callbacks, sending every sample as one request of ``client``."""

    def __init__(
        self,
        lg: Any,
        client: InferClient,
        loop: asyncio.AbstractEventLoop,
        max_in_flight: int,
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._lg, self._client, self._loop = lg, client, loop
        self._max_in_flight, self._timeout = max_in_flight, timeout
        self._waiting: deque[int] = deque()  # sample ids not sent yet (loop thread only)
        self._senders: set[asyncio.Task[None]] = set()
        self.errors = 0
        self.first_error = ""

    def issue_queries(self, samples: list[Any]) -> None:
        """LoadGen's thread: hand the samples to the loop and return at once."""
        self._loop.call_soon_threadsafe(self._enqueue, [s.id for s in samples])

    def flush_queries(self) -> None:
        """Nothing is held back: every sample is sent as soon as a slot is free."""

    def _enqueue(self, ids: list[int]) -> None:
        self._waiting.extend(ids)
        # one sender per request in flight; senders take samples until none wait
        while self._waiting and len(self._senders) < self._max_in_flight:
            task = self._loop.create_task(self._send())
            self._senders.add(task)
            task.add_done_callback(self._senders.discard)

    async def _send(self) -> None:
        lg, waiting = self._lg, self._waiting
        while waiting:
            sample_id = waiting.popleft()
            try:
                async with asyncio.timeout(self._timeout):
                    await self._client.call()
            except TimeoutError:
                self._failed(f"no answer in {self._timeout:g} s")
            except Exception as exc:  # whatever failed, LoadGen must get the sample back
                self._failed(str(exc) or type(exc).__name__)
            # performance mode: LoadGen needs no data; a failed sample gets the same empty one
            lg.QuerySamplesComplete([lg.QuerySampleResponse(sample_id, 0, 0)])

    def _failed(self, message: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or message


@dataclass
class RunResult:
    """One LoadGen run: its summary, the failed responses and the client's CPU time."""

    summary: Summary
    errors: int
    first_error: str
    cpu_seconds: float
    """this process's CPU time (every thread: LoadGen's, the client loop's) over the run"""
    wall_seconds: float
    log_dir: Path

    @property
    def valid(self) -> bool:
        """LoadGen said VALID and no response failed."""
        return self.summary.valid and not self.errors


def run_loadgen(
    lg: Any,
    loop: LoopThread,
    client: InferClient,
    settings: Any,
    log_dir: Path,
    max_in_flight: int,
) -> RunResult:
    """One LoadGen test with ``settings`` against ``client``, logs in ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    sut_callbacks = Sut(lg, client, loop.loop, max_in_flight)
    sut = lg.ConstructSUT(sut_callbacks.issue_queries, sut_callbacks.flush_queries)
    qsl = lg.ConstructQSL(QSL_SIZE, QSL_SIZE, _no_samples, _no_samples)
    output = lg.LogOutputSettings()
    output.outdir = str(log_dir)
    output.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = output
    log_settings.enable_trace = False  # the trace costs client CPU and is not read
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
    finally:
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    return RunResult(
        read_summary(log_dir),
        sut_callbacks.errors,
        sut_callbacks.first_error,
        cpu,
        wall,
        log_dir,
    )


def _no_samples(indexes: list[int]) -> None:
    """QSL load / unload: the one request is encoded once, before LoadGen starts."""
