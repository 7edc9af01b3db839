"""Starting ``inferplex serve`` as a child process on free loopback ports, for the runs that
need a server of their own (scheduling A/B, the tuner's candidates)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from inferplex.benchtool import BenchError

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Launched:
    """A running server's addresses."""

    http: str
    grpc: str
    metrics: str

    def address(self, protocol: str) -> str:
        return self.grpc if protocol == "grpc" else self.http


@contextmanager
def launch(
    repository: Path, args: Sequence[str] = (), ready_timeout: float = 120.0
) -> Iterator[Launched]:
    """Serve ``repository`` with the extra ``serve`` flags ``args`` until the block ends.

    Waits for ``/v2/health/ready``; stops with SIGTERM (the server drains) and waits.
    BenchError with the server's log when it exits or is not ready in time.
    """
    ports = [_free_port() for _ in range(3)]
    command = [
        sys.executable, "-m", "inferplex", "serve",
        "--model-repository", str(repository), "--host", HOST,
        "--http-port", str(ports[0]), "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]), *args,
    ]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ)
        )
        try:
            _wait_ready(process, f"http://{HOST}:{ports[0]}/v2/health/ready", ready_timeout, log)
            yield Launched(f"{HOST}:{ports[0]}", f"{HOST}:{ports[1]}", f"{HOST}:{ports[2]}")
        finally:
            _stop(process)


def _wait_ready(process: subprocess.Popen[bytes], url: str, timeout: float, log: object) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            raise BenchError(f"the server exited with {process.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)  # polling a child's readiness, with a deadline
    raise BenchError(f"the server was not ready after {timeout:g} s:\n{_tail(log)}")


def _tail(log: object) -> str:
    log.seek(0)  # type: ignore[attr-defined]
    return log.read()[-4000:].decode(errors="replace")  # type: ignore[attr-defined]


def _stop(process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
