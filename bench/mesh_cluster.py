"""Mesh replicas on loopback behind a real nginx configured from the ring, and closed-loop
clients over every model: the pieces of bench/mesh.py and tests/integration/test_mesh.py.

Replicas start as ``inferplex serve`` processes (benchtool.cluster's ``start_replica``) with
their mesh settings in the environment; nginx runs in the foreground on the configuration
``inferplex.mesh.nginx.render`` writes from the same ring the replicas use.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil
import requests
import uvloop

from inferplex.mesh.nginx import MODEL_HEADER, Backend, Listen, render
from inferplex.mesh.ring import Ring, copies_by_model
from inferplex_tools.benchtool import arrays
from inferplex_tools.benchtool.clients import (
    ConnectionClosed,
    HttpConnection,
    RequestFailed,
    grpc_infer,
)
from inferplex_tools.benchtool.cluster import Nginx, nginx_binary, start_replica
from inferplex_tools.benchtool.launch import HOST, RunningServer, free_port, poll_ready
from inferplex_tools.benchtool.payloads import header_value

REPLICAS = ("r0", "r1", "r2")
#: One ONNX Runtime thread per replica: the replicas share the machine's cores. glibc's mmap
#: threshold fixed at its default start (128 KiB) instead of rising with each large free:
#: with the rising one a model's footprint, the RSS growth of its load, measured 2.5 to
#: 10 MiB for identical 2.6 MB models, with the fixed one 2.6 every time (docs/mesh.md).
REPLICA_ENV = {
    "INFERPLEX_INTRA_OP_THREADS": "1",
    "INFERPLEX_LOG_LEVEL": "warning",
    "MALLOC_MMAP_THRESHOLD_": "131072",
}
MIB = 1024 * 1024


@dataclass(frozen=True)
class Workload:
    """The request every model gets and the answer expected from each."""

    inputs: arrays.Arrays
    expected: arrays.Arrays
    atol: float = 0.0


def build_models(repo: Path, count: int, make: Callable[[Path, str], Path]) -> list[str]:
    """``count`` models ``model_000``, ``model_001``, ... made by ``make(repo, name)``."""
    names = [f"model_{i:03d}" for i in range(count)]
    for name in names:
        make(repo, name)
    return names


def add_sub_workload() -> Workload:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 2.0, dtype=np.float32)
    return Workload({"INPUT0": a, "INPUT1": b}, {"OUTPUT0": a + b, "OUTPUT1": a - b})


# -- the mesh: replicas on the ring, nginx configured from it -------------------------------
@dataclass
class MeshCluster:
    """Mesh replicas (``--mesh-replicas``) on loopback and nginx routing by the ring."""

    repository: Path
    folder: Path
    memory_limit: int = 0
    #: --process-memory-limit: the whole replica's RSS (0 = none)
    process_limit: int = 0
    copies: int = 1
    replicas: dict[str, RunningServer] = field(default_factory=dict)
    nginx: Nginx | None = None

    def env(self, name: str) -> dict[str, str]:
        return {
            **REPLICA_ENV,
            "INFERPLEX_MESH_REPLICAS": ",".join(REPLICAS),
            "INFERPLEX_MESH_SELF": name,
            "INFERPLEX_MESH_COPIES": str(self.copies),
            "INFERPLEX_LOAD_ON_DEMAND": "true",
            "INFERPLEX_MEMORY_LIMIT": str(self.memory_limit),
            "INFERPLEX_PROCESS_MEMORY_LIMIT": str(self.process_limit),
        }

    def start(self) -> None:
        for name in REPLICAS:
            self.start_replica(name)
        self.nginx = self._start_nginx()

    def start_replica(self, name: str, ports: tuple[int, int, int] | None = None) -> None:
        log = self.folder / f"mesh-{name}.log"
        self.replicas[name] = start_replica(self.repository, log, ports, env=self.env(name))

    def owners(self) -> dict[str, tuple[str, ...]]:
        """Each model's owners, as the ring places them."""
        ring = Ring(REPLICAS)
        return {m: ring.owners(m, k) for m, k in self.copies_by_model().items()}

    def backup(self, model: str) -> str:
        """The replica after ``model``'s owners on the ring: nginx's backup for it."""
        return Ring(REPLICAS).owners(model, self.copies_by_model()[model] + 1)[-1]

    def copies_by_model(self) -> dict[str, int]:
        models = sorted(p.name for p in self.repository.iterdir() if p.is_dir())
        return copies_by_model(self.repository, models, self.copies)

    def config(self, prefix: Path, http_port: int, grpc_port: int, down: Collection[str]) -> str:
        backends = [Backend(n, r.http_url, r.grpc_url) for n, r in self.replicas.items()]
        listen = Listen(f"{HOST}:{http_port}", f"{HOST}:{grpc_port}", str(prefix), "1")
        return render(Ring(REPLICAS), self.copies_by_model(), backends, listen, down)

    def _start_nginx(self, deadline: float = 20.0) -> Nginx:
        binary = nginx_binary()
        if binary is None:
            raise FileNotFoundError("nginx is not installed (scripts/system_packages.sh)")
        prefix = self.folder / "mesh-nginx"
        (prefix / "tmp").mkdir(parents=True, exist_ok=True)
        http_port, grpc_port = free_port(), free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(self.config(prefix, http_port, grpc_port, ()))
        command = [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
        with (prefix / "stdout.log").open("wb") as out:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [*command, "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT
            )
        nginx = Nginx(process, prefix, http_port, grpc_port)
        poll_ready(process, nginx.http_url, deadline, "nginx", nginx.error_log)
        return nginx

    def reload(self, down: Collection[str] = (), deadline: float = 30.0) -> None:
        """Rewrite nginx's configuration (``down``: replicas drained) and wait until no
        worker of the old one is left."""
        nginx = self.router()
        old = {child.pid for child in psutil.Process(nginx.process.pid).children()}
        text = self.config(nginx.prefix, nginx.http_port, nginx.grpc_port, down)
        (nginx.prefix / "nginx.conf").write_text(text)
        nginx.process.send_signal(signal.SIGHUP)
        end = time.monotonic() + deadline
        while any(psutil.pid_exists(pid) for pid in old):
            if time.monotonic() > end:
                raise TimeoutError(f"nginx's old workers still running:\n{nginx.error_log()}")
            time.sleep(0.02)  # polling the old workers' exit, with a deadline

    def restart(self, name: str) -> None:
        """Drain ``name`` at nginx, stop it (SIGTERM), start it again where it was, undrain."""
        old = self.replicas[name]
        self.reload(down={name})
        if old.stop() != 0:
            raise RuntimeError(f"replica {name} did not exit cleanly:\n{old.log()[-4000:]}")
        self.start_replica(name, (old.http_port, old.grpc_port, old.metrics_port))
        self.reload()

    def router(self) -> Nginx:
        if self.nginx is None:
            raise RuntimeError("nginx is not running")
        return self.nginx

    def stop(self) -> None:
        if self.nginx is not None:
            self.nginx.stop()
        for replica in self.replicas.values():
            if replica.process.poll() is None:
                replica.stop()


def loaded_models(replica: RunningServer) -> set[str]:
    """The models a replica has loaded (READY in its repository index)."""
    url = f"http://{replica.http_url}/v2/repository/index"
    rows = requests.post(url, json={"ready": True}, timeout=30).json()
    return {row["name"] for row in rows}


def memory(replica: RunningServer) -> dict[str, Any]:
    """``GET /v2/repository/memory``: the budget, the models' footprints, the RSS."""
    url = f"http://{replica.http_url}/v2/repository/memory"
    report: dict[str, Any] = requests.get(url, timeout=30).json()
    return report


# -- load: closed-loop clients over every model ---------------------------------------------
@dataclass(frozen=True)
class Failure:
    kind: str
    at: float
    error: str


class MeshLoad:
    """Closed-loop HTTP binary and gRPC clients through nginx, each going round all the
    models (from a different start); every answer is checked, every failure recorded."""

    def __init__(
        self,
        nginx: Nginx,
        models: Sequence[str],
        workload: Workload,
        http_clients: int,
        grpc_clients: int = 0,
    ) -> None:
        self.nginx = nginx
        self.models = list(models)
        self.workload = workload
        self.lanes = {"http": http_clients, "grpc": grpc_clients}
        self.ok: Counter[str] = Counter()
        #: each model's last answer (time.monotonic()), over any kind and by kind
        self.answered: dict[str, float] = {}
        self.answered_by: dict[str, dict[str, float]] = {kind: {} for kind in self.lanes}
        self.failures: list[Failure] = []
        self.resent = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Event()

    def __enter__(self) -> MeshLoad:
        self._thread = threading.Thread(target=uvloop.run, args=(self._run(),), daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def total(self) -> int:
        return sum(self.ok.values())

    def rate(self, seconds: float) -> float:
        """Answers per second over the next ``seconds``."""
        before, start = self.total(), time.monotonic()
        time.sleep(seconds)  # the measurement window
        return (self.total() - before) / (time.monotonic() - start)

    def wait_for(self, answers: int, deadline: float = 60.0) -> None:
        target = self.total() + answers
        end = time.monotonic() + deadline
        while self.total() < target:
            if time.monotonic() > end:
                raise TimeoutError(f"load stalled: {dict(self.ok)}, {self.failures[:5]}")
            time.sleep(0.02)  # polling the counters, with a deadline

    def answered_since(self, mark: float, kind: str | None = None) -> set[str]:
        """The models answered at or after ``mark``, over ``kind`` only if given."""
        answered = self.answered if kind is None else self.answered_by[kind]
        return {m for m, at in answered.items() if at >= mark}

    async def _run(self) -> None:
        channel, infer = grpc_infer(self.nginx.grpc_url)
        count = self.lanes["http"] + self.lanes["grpc"]
        step = max(1, len(self.models) // max(1, count))
        clients = [self._http(lane * step) for lane in range(self.lanes["http"])]
        clients += [
            self._grpc(infer, (self.lanes["http"] + lane) * step)
            for lane in range(self.lanes["grpc"])
        ]
        self._started.set()
        try:
            await asyncio.gather(*clients)
        finally:
            await channel.close()

    def _order(self, start: int) -> list[str]:
        return self.models[start:] + self.models[:start]

    def _answer(self, kind: str, model: str, outputs: dict[str, np.ndarray]) -> None:
        arrays.check_outputs(outputs, self.workload.expected, model, self.workload.atol)
        self.ok[kind] += 1
        self.answered[model] = self.answered_by[kind][model] = time.monotonic()

    async def _http(self, start: int) -> None:
        w = self.workload
        host = self.nginx.http_url
        order = self._order(start)
        encoded = [arrays.http_binary_request(host, m, w.inputs, list(w.expected)) for m in order]
        connection: HttpConnection | None = None
        answered, index = 0, 0
        while not self._stop.is_set():
            model = order[index]
            try:
                if connection is None:
                    connection = await HttpConnection.open(HOST, self.nginx.http_port)
                    answered = 0
                head, body = await connection.send(encoded[index])
                self._answer("http", model, arrays.decode_http_response(head, body))
                answered += 1
                index = (index + 1) % len(order)
                if header_value(head, b"connection") == b"close":
                    connection.close()
                    connection = None
            except ConnectionClosed as error:
                # a kept-alive connection nginx closed unanswered (an old worker leaving
                # after a reload): an HTTP client sends again on a new connection, once
                if answered:
                    self.resent += 1
                else:
                    self.failures.append(Failure("http", time.monotonic(), repr(error)))
                connection = None
            except (arrays.BadResponse, RequestFailed, OSError) as error:
                self.failures.append(Failure("http", time.monotonic(), f"{model}: {error!r}"))
                if connection is not None:
                    connection.close()
                connection = None
                index = (index + 1) % len(order)
        if connection is not None:
            connection.close()

    async def _grpc(self, infer: Any, start: int) -> None:
        w = self.workload
        order = self._order(start)
        encoded = [arrays.grpc_request(m, w.inputs, list(w.expected)) for m in order]
        index = 0
        while not self._stop.is_set():
            model = order[index]
            try:
                metadata = ((MODEL_HEADER, model),)
                answer = await infer(encoded[index], metadata=metadata, timeout=60)
                self._answer("grpc", model, arrays.decode_grpc_response(answer))
            except arrays.BadResponse as error:
                self.failures.append(Failure("grpc", time.monotonic(), f"{model}: {error}"))
            except grpc.aio.AioRpcError as error:
                detail = f"{model}: {error.code().name} {error.details()}"
                self.failures.append(Failure("grpc", time.monotonic(), detail))
            index = (index + 1) % len(order)
