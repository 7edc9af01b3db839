"""The server's side of one worker process (a Python model's handler, or an isolated model's
backend): starting it, talking to it with deadlines, telling how it ended, and replacing it."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Iterable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from inferplex.backends.worker.arena import Arena
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.backends.worker.messages import Init, LoadFailed, MetricUpdates, Stop, Wire
from inferplex.backends.worker.model_metrics import MODEL_METRICS

WORKER_MODULE = "inferplex.backends.python.worker"


class WorkerGone(Exception):
    """The worker process died; the message says how (exit code or signal)."""


class WorkerSilent(Exception):
    """The worker did not answer before the deadline."""


class WorkerFailed(Exception):
    """The handler could not be loaded; the message is the worker's reason."""


#: the worker processes running now (a forced exit kills them: ``kill_all_workers``)
_RUNNING: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()


def kill_all_workers() -> int:
    """SIGKILL every worker process running now, without waiting; how many there were.
    For a forced exit: a worker whose server is gone would go on with what it was doing."""
    killed = 0
    for worker in list(_RUNNING):
        process = worker._process
        if process is not None and process.poll() is None:
            process.kill()
            killed += 1
    return killed


class WorkerProcess:
    """One worker process with its pipe, its arena and, with ``cancel_slots``, a cancel board
    for batches of up to that many requests (``backends/worker/cancel.py``). With ``outbox``
    the worker's link (its calls to other models, a decoupled model's responses) has a pipe
    (``exchange``) and an arena (``outbox``) of its own: a decoupled model's threads send
    responses while the next batch runs, and the thread that sends reads the answer itself.
    Else the link shares the worker's pipe and arena (no ``exchange``; ``outbox`` is
    ``arena``). The arenas and the board outlive restarts."""

    def __init__(
        self,
        init: dict[str, Any],
        env: dict[str, str],
        arena_size: int,
        cancel_slots: int = 0,
        outbox: bool = False,
    ) -> None:
        self.arena = Arena.create(arena_size)
        #: where the worker writes (its responses, the inputs of its calls)
        self.outbox = Arena.create(arena_size) if outbox else self.arena
        self.board = CancelBoard.create(cancel_slots) if cancel_slots else None
        self._init = init
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None
        self._connection: Wire | None = None
        self._exchange: Wire | None = None
        self._ready = False

    @property
    def wire(self) -> Wire:
        """The running worker's connection."""
        assert self._connection is not None
        return self._connection

    @property
    def exchange(self) -> Wire:
        """The running worker's link pipe (``outbox``)."""
        assert self._exchange is not None
        return self._exchange

    @property
    def pid(self) -> int | None:
        """The process id of the running worker; None while none is started."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start a worker and send it the model to load; ``wait_ready`` waits for it."""
        ours, theirs = socket.socketpair()
        board = -1 if self.board is None else self.board.fd
        outbox = exchange = -1
        link_ours = link_theirs = None
        if self.outbox is not self.arena:
            link_ours, link_theirs = socket.socketpair()
            outbox, exchange = self.outbox.fd, link_theirs.fileno()
        fds = [theirs.fileno(), self.arena.fd, board, outbox, exchange]
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", WORKER_MODULE, *map(str, fds)],
                pass_fds=[fd for fd in fds if fd >= 0],
                env=self._env,
                stdin=subprocess.DEVNULL,
            )
        if link_ours is not None and link_theirs is not None:
            link_theirs.close()
            self._exchange = Wire(Connection(link_ours.detach()))
        _RUNNING.add(self)
        self._connection = Wire(Connection(ours.detach()))
        self._connection.send(Init(self._init))
        self._ready = False

    def wait_ready(self, timeout: float) -> None:
        """Until the worker has loaded the model (a dead idle worker is started again first).
        WorkerGone, WorkerSilent, or WorkerFailed if loading the handler failed."""
        if self._process is None or (self._ready and self._process.poll() is not None):
            self.start()
        if self._ready:
            return
        message = self.receive(time.monotonic() + timeout)
        if isinstance(message, LoadFailed):
            self.kill()
            raise WorkerFailed(message.reason)
        self._ready = True

    def send(self, message: object) -> None:
        """One message of ``messages.py`` to the worker."""
        assert self._connection is not None
        try:
            self._connection.send(message)
        except OSError:
            raise WorkerGone(self.exit_status()) from None

    def receive(self, deadline: float | None) -> Any:
        """The worker's next message (of ``messages.py``); WorkerSilent at the deadline,
        WorkerGone if it died. The custom metric updates a worker sends before an answer are
        applied on the way."""
        assert self._connection is not None
        while True:
            try:
                # without a deadline, recv alone waits (one system call fewer per message)
                if deadline is not None and not self._connection.poll(
                    max(0.0, deadline - time.monotonic())
                ):
                    raise WorkerSilent()
                message = self._connection.recv()
            except (EOFError, OSError):
                raise WorkerGone(self.exit_status()) from None
            if type(message) is not MetricUpdates:
                return message
            MODEL_METRICS.apply(message.updates)

    def exit_status(self) -> str:
        """How the process ended, in words."""
        assert self._process is not None
        try:
            code = self._process.wait(5.0)
        except subprocess.TimeoutExpired:
            return "its pipe closed but it is still running"
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"

    def kill(self) -> None:
        """End the process now (SIGKILL) and reap it."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        for wire in (self._connection, self._exchange):
            if wire is not None:
                wire.close()
        self._process = self._connection = self._exchange = None
        self._ready = False
        _RUNNING.discard(self)

    def restart(self) -> None:
        """Replace the worker: kill it and start a new one, without waiting for it to load."""
        self.kill()
        self.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the worker to finalize and exit; kill it if it does not within ``timeout``."""
        process = self._process
        if process is not None and process.poll() is None and self._ready:
            try:
                self.send(Stop())
                process.wait(timeout)
            except (WorkerGone, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.arena.close()
        if self.outbox is not self.arena:
            self.outbox.close()
        if self.board is not None:
            self.board.close()


#: glibc's malloc in the worker: allocations under 64 MiB come from the heap, and up to 64 MiB
#: that a batch freed stays with the process for the next one. With glibc's adaptive defaults
#: the worker gave the memory of a handler's large output back to the system after each batch
#: and faulted it in again on the next (240 page faults per batch for a 1 MiB output; the
#: round trip of two 1 MiB tensors took 858 µs instead of 411-447).
MALLOC_TUNABLES = "glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=67108864"


#: variables a worker process gets from the server's environment, where set: what Python,
#: the C library, numeric libraries and CUDA need (docs/security.md). Nothing else reaches a
#: model's code: not the server's own settings (INFERPLEX_*: the API tokens, the model key),
#: not the cloud credentials or anything else its environment holds. ``--worker-env NAME``
#: adds a variable.
WORKER_ENV = (
    *("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP"),
    *("PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"),
    *("PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "VIRTUAL_ENV", "XDG_CACHE_HOME"),
    *("LD_LIBRARY_PATH", "GLIBC_TUNABLES", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"),
)
#: families of variables passed on by prefix: locale, numeric libraries' threads, CUDA
WORKER_ENV_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_", "NVIDIA_")
#: a variable of the list whose name looks like a secret's is held back all the same
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)

#: the variables ``--worker-env`` adds (set by the server at start)
_extra: tuple[str, ...] = ()


def pass_to_workers(names: Iterable[str]) -> None:
    """Add the variables ``names`` (the server's ``--worker-env``) to what workers get."""
    global _extra
    _extra = tuple(names)


def _inherited(name: str) -> bool:
    listed = name in WORKER_ENV or name.startswith(WORKER_ENV_PREFIXES)
    return listed and not SECRET_NAME.search(name)


def worker_env(threads: int) -> dict[str, str]:
    """The worker's environment, built from nothing: the variables of ``WORKER_ENV`` and
    ``WORKER_ENV_PREFIXES`` and those ``pass_to_workers`` added, this inferplex importable,
    numeric libraries limited to the instance's thread budget and malloc keeping batch-sized
    memory (``MALLOC_TUNABLES``), unless the environment says otherwise."""
    env = {name: value for name, value in os.environ.items() if _inherited(name)}
    env.update({name: os.environ[name] for name in _extra if name in os.environ})
    source = str(Path(__file__).resolve().parents[3])  # the folder inferplex/ is in
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(name, str(threads))
    env.setdefault("GLIBC_TUNABLES", MALLOC_TUNABLES)
    return env
