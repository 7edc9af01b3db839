"""Several ``inferplex serve`` replicas on loopback behind a real nginx, for the scale-out test
(tests/deploy/) and ``bench/scale_out.py``.

nginx runs in the foreground from a prefix folder of its own, with the configuration rendered
from ``deploy/nginx/nginx.conf.template`` (the file users start from), so the test checks the
shipped retry policy rather than a private copy of it. The template is read from the source
checkout this package runs from (an editable install); psutil (the ``bench`` extra) is needed.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from inferplex_tools.benchtool.launch import (
    HOST,
    Listening,
    RunningServer,
    free_port,
    poll_ready,
    start_server,
    stop_process,
)

#: src/inferplex_tools/benchtool/cluster.py -> the checkout's deploy/nginx/
TEMPLATE = Path(__file__).resolve().parents[3] / "deploy" / "nginx" / "nginx.conf.template"

_PLACEHOLDER = re.compile(r"\$\{([A-Z_]+)\}")


def nginx_binary() -> str | None:
    """nginx's path; Debian installs it in /usr/sbin, which a non-root PATH may lack."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def render(template: str, values: Mapping[str, str], backends: Mapping[str, Sequence[str]]) -> str:
    """Fill ``${NAME}`` placeholders; a line holding a ``backends`` name is repeated per item.

    Anything else that starts with ``$`` is nginx's own variable and stays, as do comments.
    An unknown ``${NAME}`` raises, so the template and this renderer cannot drift apart.
    """
    lines: list[str] = []
    for line in template.splitlines():
        if line.lstrip().startswith("#"):
            lines.append(line)
            continue
        names = [name for name in backends if f"${{{name}}}" in line]
        variants = (
            [line.replace(f"${{{names[0]}}}", item) for item in backends[names[0]]]
            if names
            else [line]
        )
        lines.extend(_PLACEHOLDER.sub(lambda m: _value(values, m.group(1)), v) for v in variants)
    return "\n".join(lines) + "\n"


def _value(values: Mapping[str, str], name: str) -> str:
    if name not in values:
        raise KeyError(f"nginx template placeholder ${{{name}}} has no value")
    return values[name]


@dataclass
class Nginx(Listening):
    """A foreground nginx balancing HTTP and gRPC over the replicas."""

    process: subprocess.Popen[bytes]
    prefix: Path
    http_port: int
    grpc_port: int

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def reload(
        self, replicas: Sequence[RunningServer], down: Collection[int] = (), deadline: float = 30.0
    ) -> None:
        """Send traffic only to the replicas not in ``down`` (indexes), as an operator does
        before stopping one; returns once no worker with the old configuration is left."""
        old_workers = {child.pid for child in psutil.Process(self.process.pid).children()}
        _write_config(self.prefix, self.http_port, self.grpc_port, replicas, down)
        self.process.send_signal(signal.SIGHUP)
        end = time.monotonic() + deadline
        while any(psutil.pid_exists(pid) for pid in old_workers):
            if time.monotonic() > end:
                raise TimeoutError(f"nginx's old workers still running:\n{self.error_log()}")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGQUIT is nginx's graceful stop; it exits 0 once open requests are answered."""
        return stop_process(self.process, signal.SIGQUIT, timeout)


def start_nginx(prefix: Path, replicas: Sequence[RunningServer], deadline: float = 20.0) -> Nginx:
    """Render the shipped template for ``replicas`` into ``prefix`` and run nginx on it."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError("nginx is not installed (scripts/system_packages.sh installs it)")
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    http_port, grpc_port = free_port(), free_port()
    conf = _write_config(prefix, http_port, grpc_port, replicas, down=())
    # -e: the error log before the configuration is read (Debian's default needs root).
    command = [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    with (prefix / "stdout.log").open("wb") as out:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [*command, "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT
        )
    nginx = Nginx(process, prefix, http_port, grpc_port)
    _wait_proxying(nginx, deadline)
    return nginx


def _write_config(
    prefix: Path,
    http_port: int,
    grpc_port: int,
    replicas: Sequence[RunningServer],
    down: Collection[int],
) -> Path:
    def backend(index: int, address: str) -> str:
        return f"{address} down" if index in down else address

    config = render(
        TEMPLATE.read_text(),
        {
            "PREFIX": str(prefix),
            "HTTP_LISTEN": f"{HOST}:{http_port}",
            "GRPC_LISTEN": f"{HOST}:{grpc_port}",
        },
        {
            "HTTP_BACKEND": [backend(i, r.http_url) for i, r in enumerate(replicas)],
            "GRPC_BACKEND": [backend(i, r.grpc_url) for i, r in enumerate(replicas)],
        },
    )
    conf = prefix / "nginx.conf"
    conf.write_text(config)
    return conf


def _wait_proxying(nginx: Nginx, deadline: float) -> None:
    """Poll readiness through nginx until a replica answers 200 by way of it."""
    poll_ready(nginx.process, nginx.http_url, deadline, "nginx", nginx.error_log)


def start_replica(
    repository: Path,
    log_path: Path,
    ports: tuple[int, int, int] | None = None,
    env: Mapping[str, str] | None = None,
    deadline: float = 120.0,
    *,
    host: str = HOST,
) -> RunningServer:
    """``inferplex serve`` on ``host`` at the given (http, grpc, metrics) ports, or free
    ones; waits until ready. Fixed ports let a restarted replica come back where nginx
    expects it, and its log goes on in the same file."""
    return start_server(repository, log_path, env, deadline, ports=ports, append=True, host=host)
