"""Starting ``inferplex serve`` as a child process on loopback ports, for the runs that need a
server of their own: the bench's scheduling A/B and the tuner's candidates (:func:`launch`),
the benchmarks in ``bench/`` and the tests that serve over real sockets (:func:`start_server`).

Readiness is polled on ``/v2/health/ready`` with a deadline; a server that exits or is not
ready in time is a BenchError carrying the end of its log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from inferplex_tools.benchtool import BenchError

HOST = "127.0.0.1"
#: how much of a server's log a failure to start quotes
LOG_TAIL = 8000


class Ports(NamedTuple):
    """A launched server's ports."""

    http: int
    grpc: int
    metrics: int


def parse_ports(text: str) -> Ports:
    """``HTTP,GRPC,METRICS``: three distinct port numbers; ValueError saying what was
    expected."""
    try:
        ports = tuple(int(part) for part in text.split(","))
    except ValueError:
        ports = ()
    if len(ports) != 3 or len(set(ports)) != 3 or not all(0 < p < 65536 for p in ports):
        raise ValueError(
            f"expected three distinct port numbers HTTP,GRPC,METRICS (1-65535), e.g. "
            f"8000,8001,8002; got '{text}'"
        )
    return Ports(*ports)


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now at ``host`` (a loopback address)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Listening:
    """The addresses of a process listening on ``host`` (HOST unless a subclass says) at
    ``http_port`` and ``grpc_port``."""

    http_port: int
    grpc_port: int
    host: str = HOST

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def stop_process(
    process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float = 60.0
) -> int:
    """Send ``sig`` (the program's graceful stop), then wait for the exit; returns the exit
    code. A process still running after ``timeout`` is killed and TimeoutExpired raised."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise


@dataclass
class RunningServer(Listening):
    """A started ``inferplex serve`` process, its ports, its log file and the address it
    listens on (``--host``)."""

    process: subprocess.Popen[bytes]
    repository: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    host: str = HOST

    @property
    def metrics_url(self) -> str:
        return f"{self.host}:{self.metrics_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (the server drains), then wait for the exit; returns the exit code. A
        server still running after ``timeout`` is killed and TimeoutExpired raised."""
        return stop_process(self.process, signal.SIGTERM, timeout)


def start_server(
    repository: Path,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    deadline: float = 120.0,
    *,
    ports: tuple[int, int, int] | None = None,
    args: Sequence[str] = (),
    append: bool = False,
    host: str = HOST,
) -> RunningServer:
    """Serve ``repository`` with the extra ``serve`` flags ``args`` on ``host`` (``--host``:
    HTTP, gRPC and metrics bind it) at the (http, grpc, metrics) ``ports``, free ones by
    default, and wait until it is ready. Its output goes to ``log_path``, appended to with
    ``append`` (a restarted server's log goes on). ``env`` adds to this process's
    environment."""
    http_port, grpc_port, metrics_port = ports or Ports(
        free_port(host), free_port(host), free_port(host)
    )
    command = [
        sys.executable, "-m", "inferplex", "serve",
        "--model-repository", str(repository),
        "--host", host,
        "--http-port", str(http_port),
        "--grpc-port", str(grpc_port),
        "--metrics-port", str(metrics_port),
        *args,
    ]  # fmt: skip
    with log_path.open("ab" if append else "wb") as log:  # the child keeps its own copy
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    server = RunningServer(process, repository, http_port, grpc_port, metrics_port, log_path, host)
    wait_ready(server, deadline)
    return server


def wait_ready(server: RunningServer, deadline: float) -> None:
    """Poll ``/v2/health/ready`` until it answers 200; BenchError with the end of the log if
    the server exits first or is not ready after ``deadline`` seconds (then it is killed)."""
    poll_ready(server.process, server.http_url, deadline, "the server", lambda: _tail(server))


def poll_ready(
    process: subprocess.Popen[bytes],
    address: str,
    deadline: float,
    what: str,
    log: Callable[[], str],
) -> None:
    """Poll ``/v2/health/ready`` at ``address`` (host:port, the server's or a proxy's in
    front of it) until it answers 200. BenchError naming ``what`` with ``log()`` if
    ``process`` exits first or nothing is ready after ``deadline`` seconds (then it is
    killed)."""
    end = time.monotonic() + deadline
    url = f"http://{address}/v2/health/ready"
    while time.monotonic() < end:
        if process.poll() is not None:
            raise BenchError(f"{what} exited with {process.returncode}:\n{log()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)  # polling a child's readiness, with a deadline
    process.kill()
    process.wait()
    raise BenchError(f"{what} was not ready after {deadline:g} s:\n{log()}")


def _tail(server: RunningServer) -> str:
    return server.log()[-LOG_TAIL:]


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
    repository: Path,
    args: Sequence[str] = (),
    ready_timeout: float = 120.0,
    ports: Ports | None = None,
) -> Iterator[Launched]:
    """Serve ``repository`` with the extra ``serve`` flags ``args`` on ``ports`` (free ones
    by default) until the block ends, then stop it (SIGTERM: the server drains) and wait.
    Its log lives in a temporary folder for as long as it runs."""
    with tempfile.TemporaryDirectory(prefix="inferplex-launch-") as folder:
        server = start_server(
            repository, Path(folder) / "server.log", deadline=ready_timeout, args=args, ports=ports
        )
        try:
            yield Launched(server.http_url, server.grpc_url, server.metrics_url)
        finally:
            with contextlib.suppress(subprocess.TimeoutExpired):  # killed by then
                server.stop()
