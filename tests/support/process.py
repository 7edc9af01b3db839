"""Starting a real ``inferplex serve`` process on free loopback ports, and waiting for it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    repository: Path
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"{HOST}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{HOST}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"{HOST}:{self.metrics_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then wait for the graceful exit; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


def start_server(
    repository: Path, log_path: Path, env: dict[str, str] | None = None, deadline: float = 120.0
) -> RunningServer:
    """Start the server as a subprocess and poll /v2/health/ready until it answers 200."""
    ports = [free_port() for _ in range(3)]
    command = [
        sys.executable, "-m", "inferplex", "serve",
        "--model-repository", str(repository),
        "--host", HOST,
        "--http-port", str(ports[0]),
        "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]),
    ]  # fmt: skip
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    http_port, grpc_port, metrics_port = ports
    server = RunningServer(process, repository, http_port, grpc_port, metrics_port, log_path)
    wait_ready(server, deadline)
    return server


def wait_ready(server: RunningServer, deadline: float) -> None:
    end = time.monotonic() + deadline
    url = f"http://{server.http_url}/v2/health/ready"
    while time.monotonic() < end:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited with {server.process.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    server.process.kill()
    raise TimeoutError(f"server not ready after {deadline}s:\n{server.log()}")
