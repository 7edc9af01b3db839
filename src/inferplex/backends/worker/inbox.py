"""The server's end of a decoupled model's worker link: a thread that reads the link's pipe
(``WorkerProcess.exchange``) for as long as the worker lives.

A decoupled model's ``execute`` may return while threads it started still send responses
(Triton's decoupled examples do); the instance takes its next batch at once, as Triton's
does. So responses arrive between batches and during later ones, on a pipe of their own:
this thread delivers each (into its request's bounded response channel, then ``Sent``
back: a slow reader holds the sending thread back) and answers the worker's calls to other
models, which come the same way while a batch runs. The batch itself (``RunBatch``,
``BatchDone``) goes over the worker's main pipe, read by the instance's thread. When the
worker dies, every request still open is answered with the error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from inferplex.backends.base import RequestOutcome, ResponseSink
from inferplex.backends.worker.call_streams import LinkEnd
from inferplex.backends.worker.messages import Response, Sent
from inferplex.backends.worker.worker_process import WorkerProcess
from inferplex.errors import InferplexError

logger = logging.getLogger(__name__)


class Inbox:
    """The link reader of one worker process (a restarted worker gets a new one), and the
    requests it holds open: those of the running batch and those whose final response is
    still to come after theirs ended."""

    def __init__(
        self,
        worker: WorkerProcess,
        outcome: Callable[[Response], RequestOutcome | None],
        answer: Callable[[object, LinkEnd], None],
        deadline: Callable[[], float | None],
        ended: Callable[[str], InferplexError],
    ) -> None:
        """``outcome`` reads a response's outputs (or error); ``answer`` answers a call's
        message; ``deadline`` is the running batch's; ``ended(why)`` is the error the
        requests still open get when the worker's pipe closes."""
        self.pid = worker.pid
        self._worker = worker
        self._wire = worker.exchange  # this process's, not a replacement's
        self._outcome = outcome
        self._answer = answer
        self._deadline = deadline
        self._ended = ended
        self._open: dict[int, ResponseSink] = {}
        self._lock = threading.Lock()
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
                else:  # the link's arena holds only this exchange: answers go after it
                    self._answer(message, LinkEnd(wire, self._worker.outbox, 0, self._deadline()))
        except (EOFError, OSError):
            pass
        except Exception:  # a protocol error: the requests it holds are failed all the same
            logger.exception("worker %s: reading its link failed", self.pid)
        why = "it was replaced" if self._worker.pid != self.pid else self._worker.exit_status()
        with self._lock:
            left, self._open = list(self._open.values()), {}
        error = self._ended(why)
        for sink in left:
            sink.send(error, True)
