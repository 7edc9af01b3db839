"""A mesh that scales on loopback: three replicas reading a members file (``--mesh-members``)
and a real nginx whose configuration ``inferplex mesh nginx-config --watch`` rewrites and
reloads from the same file; the members file names some of them. Used by
tests/integration/test_mesh_scaling.py and bench/mesh.py's scale-out case.

Each replica listens on a loopback address of its own (127.0.0.11, .12, .13: all of
127.0.0.0/8 is loopback on Linux), each at the same HTTP, gRPC and metrics ports, and that
address is its ring name (``--mesh-self``), so one members file serves the replicas and nginx
(``--http-address {name}:HTTP --grpc-address {name}:GRPC``): nginx's gRPC upstreams are the
replicas' gRPC ports, and gRPC traffic through nginx is exercised as HTTP is.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.mesh_cluster import REPLICA_ENV, MeshLoad, Workload, build_models, loaded_models
from examples import modelgen
from inferplex.mesh.ring import Ring
from inferplex_tools.benchtool.cluster import Nginx, nginx_binary, start_replica
from inferplex_tools.benchtool.launch import HOST, RunningServer, free_port, poll_ready

DEADLINE = 60.0
#: the replicas' loopback addresses, which are also their ring names
ADDRESSES = ("127.0.0.11", "127.0.0.12", "127.0.0.13")


def until(done: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not done():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.05)  # polling the cluster's state, with a deadline


def shared_ports(hosts: Sequence[str], count: int) -> list[int]:
    """``count`` distinct ports free now at every one of ``hosts``."""
    ports: list[int] = []
    for _ in range(100):
        port = free_port(hosts[0])
        if port not in ports and all(_bindable(host, port) for host in hosts[1:]):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise OSError(f"no {count} ports free at all of {list(hosts)}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class ScalingMesh:
    """Three replicas started (the members file names some of them) and nginx watched."""

    def __init__(self, folder: Path, models: int) -> None:
        self.repository = folder / "models"
        self.models = build_models(self.repository, models, lambda r, n: modelgen.add_sub(r, n))
        self.members = folder / "members"
        http_port, grpc_port, metrics_port = shared_ports(ADDRESSES, 3)
        self.http_port, self.grpc_port = http_port, grpc_port
        self.names = list(ADDRESSES)
        self.write(self.names[:2])
        self.replicas: dict[str, RunningServer] = {}
        for name in self.names:
            env = {
                **REPLICA_ENV,
                "INFERPLEX_MESH_MEMBERS": f"file:{self.members}",
                "INFERPLEX_MESH_REFRESH_SECS": "0.1",
                "INFERPLEX_MESH_SELF": name,
                "INFERPLEX_LOAD_ON_DEMAND": "true",
            }
            log = folder / f"replica-{name}.log"
            ports = (http_port, grpc_port, metrics_port)
            self.replicas[name] = start_replica(self.repository, log, ports, env=env, host=name)
        self.prefix = folder / "nginx"
        (self.prefix / "tmp").mkdir(parents=True)
        self.conf = self.prefix / "nginx.conf"
        binary = str(nginx_binary())
        http, grpc = free_port(), free_port()
        base = [binary, "-p", str(self.prefix), "-c", str(self.conf)]
        base += ["-e", str(self.prefix / "error.log")]
        reload = " ".join([*base, "-s", "reload"])
        with (folder / "watch.log").open("wb") as watch_log:  # the child keeps its own descriptor
            self.watch = subprocess.Popen(
                [sys.executable, "-m", "inferplex.cli.main", "mesh", "nginx-config",
                 f"--model-repository={self.repository}", f"--members=file:{self.members}",
                 f"--http-address={{name}}:{http_port}", f"--grpc-address={{name}}:{grpc_port}",
                 f"--listen-http={HOST}:{http}", f"--listen-grpc={HOST}:{grpc}",
                 f"--prefix={self.prefix}", f"--output={self.conf}",
                 "--watch", "--refresh-secs=0.1", f"--reload-command={reload}"],
                stderr=watch_log,
            )  # fmt: skip
        until(self.conf.exists, "nginx-config --watch wrote nothing")
        process = subprocess.Popen([*base, "-g", "daemon off;"])
        self.nginx = Nginx(process, self.prefix, http, grpc)
        poll_ready(process, self.nginx.http_url, DEADLINE, "nginx", self.nginx.error_log)

    def write(self, names: list[str]) -> None:
        staged = self.members.with_suffix(".new")
        staged.write_text("".join(f"{n}\n" for n in names))
        staged.replace(self.members)

    def loaded(self) -> dict[str, set[str]]:
        return {name: loaded_models(replica) for name, replica in self.replicas.items()}

    def owned(self, names: list[str]) -> dict[str, set[str]]:
        ring = Ring(names)
        return {n: {m for m in self.models if ring.owners(m, 1) == (n,)} for n in self.names}

    def load(self, workload: Workload, http_clients: int, grpc_clients: int = 0) -> MeshLoad:
        """Closed-loop clients over every model through nginx (enter it to start them)."""
        return MeshLoad(self.nginx, self.models, workload, http_clients, grpc_clients)

    def scale(self, names: list[str], load: MeshLoad) -> dict[str, set[str]]:
        """Write the members, wait for nginx's reload and every owner's loads under traffic,
        then for every model to answer over each kind the load sends (HTTP, gRPC); the
        models each replica loaded meanwhile."""
        before = self.loaded()
        self.write(names)
        routed = set(names)

        def in_config() -> set[str]:
            text = self.conf.read_text()
            return {n for n in self.names if f"server {n}:{self.http_port} " in text}

        until(lambda: in_config() == routed, "nginx's configuration did not follow the members")
        owned = self.owned(names)
        until(
            lambda: all(owned[n] <= loaded for n, loaded in self.loaded().items()),
            "the owners did not load their models",
        )
        mark = time.monotonic()
        kinds = [kind for kind, clients in load.lanes.items() if clients]
        until(
            lambda: all(load.answered_since(mark, k) == set(self.models) for k in kinds),
            f"not every model answered over each of {kinds}",
        )
        return {n: loaded - before[n] for n, loaded in self.loaded().items()}

    def stop(self) -> None:
        self.watch.terminate()
        self.watch.wait(10)
        self.nginx.stop()
        for replica in self.replicas.values():
            replica.stop()
