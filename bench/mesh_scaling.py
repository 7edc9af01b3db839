"""A mesh that scales on loopback: three replicas reading a members file (``--mesh-members``)
and a real nginx whose configuration ``inferplex mesh nginx-config --watch`` rewrites and
reloads from the same file; the members file names some of them. Used by
tests/integration/test_mesh_scaling.py and bench/mesh.py's scale-out case.

The replicas' ring names are their HTTP addresses (``--http-address {name}``), so one members
file serves the replicas and nginx; gRPC goes to the same port and is not exercised.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.mesh_cluster import REPLICA_ENV, MeshLoad, build_models, loaded_models
from examples import modelgen
from inferplex.benchtool.cluster import Nginx, nginx_binary, start_replica
from inferplex.benchtool.launch import HOST, RunningServer, free_port, poll_ready
from inferplex.mesh.ring import Ring

DEADLINE = 60.0


def until(done: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not done():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.05)  # polling the cluster's state, with a deadline


class ScalingMesh:
    """Three replicas started (the members file names some of them) and nginx watched."""

    def __init__(self, folder: Path, models: int) -> None:
        self.repository = folder / "models"
        self.models = build_models(self.repository, models, lambda r, n: modelgen.add_sub(r, n))
        self.members = folder / "members"
        self.ports = [(free_port(), free_port(), free_port()) for _ in range(3)]
        self.names = [f"{HOST}:{http}" for http, _, _ in self.ports]
        self.write(self.names[:2])
        self.replicas: dict[str, RunningServer] = {}
        for name, ports in zip(self.names, self.ports, strict=True):
            env = {
                **REPLICA_ENV,
                "INFERPLEX_MESH_MEMBERS": f"file:{self.members}",
                "INFERPLEX_MESH_REFRESH_SECS": "0.1",
                "INFERPLEX_MESH_SELF": name,
                "INFERPLEX_LOAD_ON_DEMAND": "true",
            }
            log = folder / f"replica-{ports[0]}.log"
            self.replicas[name] = start_replica(self.repository, log, ports, env=env)
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
                 "--http-address={name}", "--grpc-address={name}", f"--listen-http={HOST}:{http}",
                 f"--listen-grpc={HOST}:{grpc}", f"--prefix={self.prefix}", f"--output={self.conf}",
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

    def scale(self, names: list[str], load: MeshLoad) -> dict[str, set[str]]:
        """Write the members, wait for nginx's reload and every owner's loads under traffic;
        the models each replica loaded meanwhile."""
        before = self.loaded()
        self.write(names)
        routed = set(names)
        until(
            lambda: {n for n in self.names if f"server {n} " in self.conf.read_text()} == routed,
            "nginx's configuration did not follow the members",
        )
        owned = self.owned(names)
        until(
            lambda: all(owned[n] <= loaded for n, loaded in self.loaded().items()),
            "the owners did not load their models",
        )
        mark = time.monotonic()
        until(lambda: load.answered_since(mark) == set(self.models), "not every model answered")
        return {n: loaded - before[n] for n, loaded in self.loaded().items()}

    def stop(self) -> None:
        self.watch.terminate()
        self.watch.wait(10)
        self.nginx.stop()
        for replica in self.replicas.values():
            replica.stop()
