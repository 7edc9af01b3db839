"""The deadline of a server's exit (``--exit-timeout-secs``, as tritonserver's).

A graceful stop waits for in-flight work: requests, and a model load, which runs in threads
and worker processes that nothing can interrupt (a Python model whose ``initialize`` sleeps,
a config asking for thousands of instances). Without a deadline, SIGTERM waited on such a
load for as long as it took, and the interpreter's exit then joined its threads. The
deadline is a daemon thread: armed when the stop begins, it ends the process at the
deadline, whatever the event loop or the interpreter's exit is waiting on, after killing the
worker processes the server started (they would go on with what they were doing).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from inferplex.backends.worker.worker_process import kill_all_workers

__all__ = ["EXIT_STATUS", "ExitDeadline"]

logger = logging.getLogger(__name__)

#: the status of an exit forced by the deadline (a graceful exit's is 0)
EXIT_STATUS = 3


class ExitDeadline:
    """Ends the process ``seconds`` after :meth:`arm` unless it has exited by then (a
    daemon thread: a process that exits first does not wait for it)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._thread = threading.Thread(target=self._run, name="exit-deadline", daemon=True)

    def arm(self) -> None:
        """Start counting (once; a second call does nothing)."""
        if not self._thread.is_alive():
            self._thread.start()

    def _run(self) -> None:
        time.sleep(self._seconds)
        logger.error(
            "in-flight work (requests, a model load) did not finish within %g s of the stop "
            "(--exit-timeout-secs, INFERPLEX_EXIT_TIMEOUT_SECS): exiting now",
            self._seconds,
        )
        killed = kill_all_workers()
        if killed:
            logger.error("killed %d worker process(es) still running", killed)
        logging.shutdown()  # flush what was logged
        os._exit(EXIT_STATUS)
