"""A model mesh on loopback: three replicas that each hold about a third of a 300-model
repository, behind a real nginx configured from the ring (docs/mesh.md), against three
replicas that each hold everything behind the shipped round-robin nginx.

    python -m bench.mesh [--models N] [--duration S] [--rounds N] [--quick]

Prints, with PASS/MISS, the targets of issue 22:

1. throughput over all models, HTTP binary: mesh / all-holding replicas (interleaved rounds,
   best of each), every model answered, no failure;
2. each mesh replica's resident memory (sampled every 50 ms through all of it) against its
   container's limit, which the replicas get as ``--process-memory-limit``: ``--memory-limit``
   plus the server's own memory (RSS less the models' footprints). ``--memory-limit`` is 1.15 x
   the largest share of owned models' footprints, measured by the mesh's replicas themselves
   in a first start without a limit: about a third of the repository, so a replica cannot
   hold what it does not own beside what it does;
3. a replica killed (SIGKILL) under HTTP and gRPC load: its models answered by their next
   owners, no failed HTTP request;
4. a rolling restart of all three under HTTP and gRPC load, each drained at nginx first:
   no failed request;
5. scale-out and back (bench/mesh_scaling.py, 2 -> 3 -> 2 replicas of add_sub copies by a
   members file, nginx-config --watch reloading nginx) under HTTP and gRPC load: no failed
   request,
   the models loaded anew are those whose owner changed per the Ring, as a fraction of all.

The models are copies of one MLP (examples.modelgen.mlp, 2.6 MB of weights), so a
replica's memory is mostly its models'. The cluster and its clients are in
bench/mesh_cluster.py. Needs nginx (scripts/system_packages.sh installs it).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
import requests

from bench.mesh_cluster import (
    MIB,
    REPLICA_ENV,
    REPLICAS,
    Failure,
    MeshCluster,
    MeshLoad,
    Workload,
    add_sub_workload,
    build_models,
    loaded_models,
    memory,
)
from bench.mesh_scaling import ScalingMesh
from bench.overhead import Timing, add_round_options, round_options
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex.mesh.ring import Ring
from inferplex_tools.benchtool.cluster import Nginx, start_nginx, start_replica
from inferplex_tools.benchtool.launch import RunningServer


def make_mlp(repo: Path, name: str) -> Path:
    """The MLP with a warm-up sample: ONNX Runtime allocates a session's working memory at
    its first run, which the footprint counted against ``--memory-limit`` then includes."""
    path = modelgen.mlp(repo, name, features=64, hidden=(768, 768))
    config = modelgen.model_config(path, max_batch_size=8)
    sample = {"data_type": "TYPE_FP32", "dims": [64], "zero_data": True}
    config["model_warmup"] = [{"name": "zeros", "batch_size": 1, "inputs": {"features": sample}}]
    write_config(repo / name, config)
    return path


def mlp_workload(model: Path) -> Workload:
    features = np.random.default_rng(0).random((1, 64), dtype=np.float32)
    logits = modelgen.onnxfile.session(model).run(None, {"features": features})[0]
    return Workload({"features": features}, {"logits": logits}, atol=1e-4)


class RssPeak(threading.Thread):
    """The highest resident memory of each replica in each phase, sampled every 50 ms, and
    every 0.5 s the replica's own view (``GET /v2/repository/memory``): the highest ``used``
    (the models' footprints) and the highest RSS less ``used`` (the server's own memory)."""

    def __init__(self, cluster: MeshCluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.phase = "start"
        self.peaks: dict[str, Counter[str]] = {}
        self.used: dict[str, Counter[str]] = {}
        self.own: dict[str, Counter[str]] = {}
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        tick = 0
        while not self._done.wait(0.05):
            tick += 1
            peak = self.peaks.setdefault(self.phase, Counter())
            used = self.used.setdefault(self.phase, Counter())
            own = self.own.setdefault(self.phase, Counter())
            for name, replica in list(self.cluster.replicas.items()):
                try:
                    rss = psutil.Process(replica.process.pid).memory_info().rss
                    report = memory(replica) if tick % 10 == 0 else None
                except (psutil.Error, requests.RequestException):
                    continue  # killed or restarting
                peak[name] = max(peak[name], rss)
                if report is not None:
                    used[name] = max(used[name], int(report["used"]))
                    own[name] = max(own[name], int(report["rss"]) - int(report["used"]))

    def stop(self) -> None:
        self._done.set()
        self.join()


# -- the benchmark ---------------------------------------------------------------------------
@dataclass
class Verdicts:
    lines: list[str] = field(default_factory=list)

    def check(self, ok: bool, target: str, figures: str) -> None:
        self.lines.append(f"{'PASS' if ok else 'MISS'}  {target}: {figures}")


def size_mesh(mesh: MeshCluster, names: list[str], w: Workload) -> tuple[dict[str, int], int]:
    """Start the mesh without a limit and serve every model once; then restart each replica
    with ``--memory-limit`` = 1.15 x the largest share of owned models' footprints. Returns
    each replica's share and the server's own memory (RSS less the models' footprints)."""
    mesh.start()
    with MeshLoad(mesh.router(), names, w, http_clients=8) as load:
        load.wait_for(3 * len(names))  # memory measured as it is while serving
    reports = {name: memory(replica) for name, replica in mesh.replicas.items()}
    shares = {name: int(report["used"]) for name, report in reports.items()}
    own = max(int(report["rss"]) - int(report["used"]) for report in reports.values())
    mesh.memory_limit = int(max(shares.values()) * 1.15)
    mesh.process_limit = mesh.memory_limit + own
    for name in REPLICAS:
        mesh.restart(name)
    return shares, own


def throughput(
    rounds: int, timing: Timing, topologies: dict[str, Nginx], names: list[str], w: Workload
) -> tuple[dict[str, float], list[Failure], set[str]]:
    """Best rate per topology over interleaved rounds; the failures; the models answered
    through the mesh."""
    best: dict[str, float] = {}
    failures: list[Failure] = []
    answered: set[str] = set()
    for number in range(1, rounds + 1):
        for topology, nginx in topologies.items():
            with MeshLoad(nginx, names, w, http_clients=8) as load:
                time.sleep(timing.warmup)  # warm-up before the window
                rate = load.rate(timing.duration)
            print(f"round {number}/{rounds} {topology:5} {rate:8.1f} req/s", flush=True)
            best[topology] = max(best.get(topology, 0.0), rate)
            failures += load.failures
            if topology == "mesh":
                answered |= set(load.answered)
    return best, failures, answered


def compare(
    mesh: MeshCluster, names: list[str], w: Workload, rounds: int, timing: Timing, v: Verdicts
) -> None:
    """The mesh against three all-holding replicas behind the shipped nginx."""
    full: list[RunningServer] = []
    full_nginx: Nginx | None = None
    try:
        for index in range(len(REPLICAS)):
            log = mesh.folder / f"full-{index}.log"
            full.append(start_replica(mesh.repository, log, env=REPLICA_ENV, deadline=600))
        full_nginx = start_nginx(mesh.folder / "full-nginx", full)
        used = int(memory(full[0])["used"])
        print(f"an all-holding replica's models: {used / MIB:.0f} MiB", flush=True)
        topologies = {"all": full_nginx, "mesh": mesh.router()}
        best, failed, answered = throughput(rounds, timing, topologies, names, w)
    finally:
        if full_nginx is not None:
            full_nginx.stop()
        for replica in full:
            replica.stop()
    ratio = best["mesh"] / best["all"]
    v.check(
        ratio >= 0.9,
        "throughput mesh / all-holding >= 0.9",
        f"{ratio:.3f} ({best['all']:.0f} -> {best['mesh']:.0f} req/s, HTTP binary, 8 clients)",
    )
    v.check(not failed, "0 failed requests", f"{len(failed)} {failed[:3]}")
    v.check(answered == set(names), "every model answered", f"{len(answered)}/{len(names)}")


def kill_under_load(mesh: MeshCluster, names: list[str], w: Workload, v: Verdicts) -> None:
    """SIGKILL a replica under load: are its models answered by their next owners?"""
    victim = "r1"
    owned = {m for m, members in mesh.owners().items() if victim in members}
    with MeshLoad(mesh.router(), names, w, http_clients=6, grpc_clients=2) as load:
        load.wait_for(300)
        mark = time.monotonic()
        mesh.replicas[victim].process.kill()
        end = mark + 60
        while not owned <= load.answered_since(mark) and time.monotonic() < end:
            time.sleep(0.05)  # polling the answers, with a deadline
        took = time.monotonic() - mark
        load.wait_for(300)
        missing = owned - load.answered_since(mark)
    http = [f for f in load.failures if f.kind == "http"]
    v.check(
        not missing and not http,
        f"{victim} killed: its models answered by the next owners, 0 failed HTTP",
        f"{len(owned) - len(missing)}/{len(owned)} of its models answered within {took:.2f} s; "
        f"failed: HTTP {len(http)}, gRPC {len(load.failures) - len(http)} "
        f"{load.failures[:2]}; answers {dict(load.ok)}",
    )
    old = mesh.replicas[victim]
    mesh.start_replica(victim, (old.http_port, old.grpc_port, old.metrics_port))


def rolling_restart(mesh: MeshCluster, names: list[str], w: Workload, v: Verdicts) -> None:
    with MeshLoad(mesh.router(), names, w, http_clients=6, grpc_clients=2) as load:
        load.wait_for(300)
        for name in REPLICAS:
            mesh.restart(name)
            load.wait_for(300)
    v.check(
        not load.failures,
        "rolling restart of all three (drained at nginx first), 0 failed",
        f"{len(load.failures)} failed {load.failures[:3]}; answers {dict(load.ok)}; "
        f"sent again after nginx closed a kept-alive connection: {load.resent}",
    )


def run(mesh: MeshCluster, names: list[str], rounds: int, timing: Timing, v: Verdicts) -> None:
    w = mlp_workload(mesh.repository / names[0] / "1" / "model.onnx")
    shares, own = size_mesh(mesh, names, w)
    total = sum(shares.values())
    print(
        f"{len(names)} models (MLP 64-768-768-10); the mesh's replicas count "
        f"{', '.join(f'{n} {b / MIB:.0f}' for n, b in shares.items())} MiB of models, "
        f"the server's own memory {own / MIB:.0f} MiB\n--memory-limit "
        f"{mesh.memory_limit / MIB:.0f} MiB = {mesh.memory_limit / total:.2f} of the "
        f"repository's footprints; --process-memory-limit {mesh.process_limit / MIB:.0f} MiB",
        flush=True,
    )
    peak = RssPeak(mesh)
    try:
        owners = mesh.owners()
        agree = all(
            loaded_models(replica) == {m for m, o in owners.items() if name in o}
            for name, replica in mesh.replicas.items()
        )
        v.check(agree, "each replica loaded (only) the models nginx sends it", str(agree))
        peak.phase = "serving every model"
        compare(mesh, names, w, rounds, timing, v)
        peak.phase = "a replica killed"
        kill_under_load(mesh, names, w, v)
        peak.phase = "rolling restart"
        rolling_restart(mesh, names, w, v)
    finally:
        peak.stop()
    bound = mesh.process_limit
    for phase in ("serving every model", "a replica killed", "rolling restart"):
        peaks = peak.peaks.get(phase, Counter())
        v.check(
            bool(peaks) and max(peaks.values()) <= bound,
            f"RSS <= --process-memory-limit (--memory-limit + the server's own), {phase}",
            ", ".join(f"{n} {b / MIB:.0f}" for n, b in sorted(peaks.items()))
            + f" MiB at most (sampled every 50 ms) <= {bound / MIB:.0f} MiB; models' "
            + _mib(peak.used.get(phase, Counter()))
            + ", the server's own "
            + _mib(peak.own.get(phase, Counter()))
            + " MiB at most (every 0.5 s)",
        )


def _mib(by_replica: Counter[str]) -> str:
    return ", ".join(f"{n} {b / MIB:.0f}" for n, b in sorted(by_replica.items()))


def scale_out(folder: Path, models: int, v: Verdicts) -> None:
    """2 -> 3 -> 2 replicas under HTTP and gRPC load (bench/mesh_scaling.py)."""
    folder.mkdir()
    mesh = ScalingMesh(folder, models)
    try:
        two, three = mesh.names[:2], mesh.names
        changed = {m for m in mesh.models if Ring(two).owners(m, 1) != Ring(three).owners(m, 1)}
        with mesh.load(add_sub_workload(), http_clients=2, grpc_clients=2) as load:
            load.wait_for(2 * models)
            out = mesh.scale(three, load)
            back = mesh.scale(two, load)
        moved_out, moved_back = set().union(*out.values()), set().union(*back.values())
        failed = Counter(failure.kind for failure in load.failures)
        v.check(
            not load.failures
            and set(load.ok) == {"http", "grpc"}
            and moved_out <= changed
            and moved_back <= changed,
            "scale-out 2 -> 3 -> 2: 0 failed over HTTP and gRPC, only models whose owner "
            "changed move",
            f"HTTP {load.ok['http']} answered, {failed['http']} failed; gRPC "
            f"{load.ok['grpc']} answered, {failed['grpc']} failed; moved out "
            f"{len(moved_out)}/{models} = {len(moved_out) / models:.2f}, back "
            f"{len(moved_back)}/{models}; the Ring's expectation {len(changed)}/{models} = "
            f"{len(changed) / models:.2f}",
        )
    finally:
        mesh.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="a model mesh of 3 replicas behind nginx")
    parser.add_argument("--models", type=int, default=300, help="models in the repository")
    add_round_options(parser, duration=3.0, warmup=1.0, rounds=3)
    args = parser.parse_args()
    rounds, timing = round_options(args, quick=Timing(1.0, 0.5))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    verdicts = Verdicts()
    with tempfile.TemporaryDirectory(prefix="inferplex-mesh-") as tmp:
        folder = Path(tmp)
        names = build_models(folder / "models", args.models, make_mlp)
        mesh = MeshCluster(folder / "models", folder)
        try:
            run(mesh, names, rounds, timing, verdicts)
        finally:
            mesh.stop()
        scale_out(folder / "scaling", 60, verdicts)
    print("\n" + "\n".join(verdicts.lines))


if __name__ == "__main__":
    main()
