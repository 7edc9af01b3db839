"""The server's reader of a decoupled model's worker: a thread that reads everything the
worker sends, for as long as it lives.

A decoupled model's ``execute`` may return while threads it started still send responses
(Triton's decoupled examples do); the instance takes its next batch at once, as Triton's
does. So responses arrive between batches and during later ones, and someone must read them
whether or not a batch runs: this thread. It delivers each response itself (into its
request's bounded response channel, then ``Sent`` back: a slow reader holds the sending
thread back) and queues everything else for the instance's thread, which runs the batch
(``receive``). When the worker dies, every request still open is answered with the error.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable

from inferplex.backends.base import RequestOutcome, ResponseSink
from inferplex.backends.worker.messages import MetricUpdates, Response, Sent
from inferplex.backends.worker.model_metrics import MODEL_METRICS
from inferplex.backends.worker.worker_process import WorkerGone, WorkerProcess, WorkerSilent
from inferplex.errors import InferplexError


class Inbox:
    """The reader of one worker process (a restarted worker gets a new one), and the
    requests it holds open: those of the running batch and those whose final response is
    still to come after theirs ended."""

    def __init__(
        self,
        worker: WorkerProcess,
        outcome: Callable[[Response], RequestOutcome | None],
        ended: Callable[[str], InferplexError],
    ) -> None:
        """``outcome`` reads a response's outputs (or error); ``ended(why)`` is the error the
        requests still open get when the worker's pipe closes."""
        self.pid = worker.pid
        self._worker = worker
        self._wire = worker.wire  # this process's, not a replacement's
        self._outcome = outcome
        self._ended = ended
        self._open: dict[int, ResponseSink] = {}
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._read, name=f"inbox-{self.pid}", daemon=True)
        self._thread.start()

    def expect(self, sinks: dict[int, ResponseSink]) -> None:
        """Responses to these requests (by number) may come from now on."""
        with self._lock:
            self._open.update(sinks)

    def forget(self, numbers: Iterable[int]) -> None:
        """No more responses to these requests are taken (their batch failed)."""
        with self._lock:
            for number in numbers:
                self._open.pop(number, None)

    def receive(self, deadline: float | None) -> object:
        """The worker's next message other than a response (for the running batch);
        WorkerSilent at the deadline, WorkerGone if the worker died."""
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise WorkerSilent() from None
        if isinstance(message, WorkerGone):
            self._queue.put(message)  # and for whoever asks next
            raise message
        return message

    def _deliver(self, response: Response) -> bool:
        """Into the request's channel (waiting while its reader is that far behind): whether
        its client is still there."""
        outcome = self._outcome(response)
        with self._lock:
            number = response.request
            sink = self._open.pop(number, None) if response.final else self._open.get(number)
        return sink is not None and sink.send(outcome, response.final)

    def _read(self) -> None:
        wire = self._wire
        try:
            while True:
                message = wire.recv()
                if type(message) is Response:
                    wire.send(Sent(self._deliver(message)))
                elif type(message) is MetricUpdates:
                    MODEL_METRICS.apply(message.updates)
                else:
                    self._queue.put(message)
        except (EOFError, OSError):
            pass
        replaced = self._worker.pid != self.pid
        why = "it was replaced" if replaced else self._worker.exit_status()
        self._queue.put(WorkerGone(why))
        with self._lock:
            left, self._open = list(self._open.values()), {}
        error = self._ended(why)
        for sink in left:
            sink.send(error, True)
