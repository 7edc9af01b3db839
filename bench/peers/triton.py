"""A real Triton Inference Server (installed by bench/peers/install.sh) on loopback ports.

    python -m bench.peers.triton [--batching dynamic|none] [--queue-delay-us 200]
                                 [--models add_sub,mlp] [--http-port P] [--grpc-port P]

serves the benchmark models (bench/peers/models.py) in Triton until Ctrl-C, to drive it with
any client (``inferplex bench``, perf_analyzer): ``--batching dynamic`` gives each model
``dynamic_batching { max_queue_delay_microseconds: --queue-delay-us }``, ``none`` runs each
request alone. bench/vs_triton.py uses :func:`triton_repository` and :func:`start_triton`.

Each model runs its ONNX file in ONNX Runtime inside Triton's Python backend
(``triton_model.py`` as its ``model.py``), with the same config as inferplex serves it but
``backend: "python"`` for the platform.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.peers.models import BUILDERS, Built, Model, build
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import (
    HOST,
    LOG_TAIL,
    Listening,
    free_port,
    poll_ready,
    stop_process,
)

#: where install.sh puts everything (its PEERS)
PEERS = Path(os.environ.get("INFERPLEX_PEERS", "/tmp/inferplex-peers"))
INSTALL = Path(__file__).resolve().parent / "install.sh"
MODEL_PY = Path(__file__).resolve().parent / "triton_model.py"
#: Python backend shared memory per model (the default 1 MB grows a step per large batch)
SHM_BYTES = 64 << 20


def tritonserver(peers: Path = PEERS) -> Path:
    return peers / "bin" / "tritonserver"


def triton_repository(models: Mapping[str, Built], out: Path) -> Path:
    """A Triton repository at ``out`` serving ``models`` (as written for inferplex) through
    the Python backend: the same config but ``backend: "python"``, and ``model.py`` beside a
    link to the ONNX file."""
    for name, model in models.items():
        config = {key: value for key, value in model.config.items() if key != "platform"}
        write_config(out / name, {**config, "backend": "python"})
        version = out / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        shutil.copy(MODEL_PY, version / "model.py")
        (version / "model.onnx").symlink_to(model.path.resolve())
    return out


@dataclass
class TritonServer(Listening):
    """A started ``tritonserver``, its ports and its log file."""

    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGINT (Triton unloads its models and stops their backend stubs), then wait;
        returns the exit code."""
        return stop_process(self.process, signal.SIGINT, timeout)


def start_triton(
    repository: Path,
    log_path: Path,
    peers: Path = PEERS,
    deadline: float = 300.0,
    ports: tuple[int, int, int] | None = None,
) -> TritonServer:
    """Serve ``repository`` with Triton on loopback, on free ports unless ``ports`` (http,
    grpc, metrics) are given, and wait until every model is ready."""
    http_port, grpc_port, metrics_port = ports or (free_port(), free_port(), free_port())
    command = [
        str(tritonserver(peers)),
        "--model-repository", str(repository),
        "--http-address", HOST, "--http-port", str(http_port),
        "--grpc-address", HOST, "--grpc-port", str(grpc_port),
        "--metrics-address", HOST, "--metrics-port", str(metrics_port),
        "--allow-gpu-metrics", "false",
        "--exit-on-error", "true",
        "--strict-readiness", "true",  # ready once every model is
        f"--backend-config=python,shm-default-byte-size={SHM_BYTES}",
        f"--backend-config=python,shm-growth-byte-size={SHM_BYTES}",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = TritonServer(process, http_port, grpc_port, metrics_port, log_path)
    poll_ready(process, server.http_url, deadline, "Triton", lambda: server.log()[-LOG_TAIL:])
    return server


def missing(peers: Path = PEERS) -> str | None:
    """Why Triton cannot run here, or None."""
    if not os.access(tritonserver(peers), os.X_OK):
        return f"Triton is not installed in {peers}: run {INSTALL}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description="serve the benchmark models in Triton")
    parser.add_argument("--batching", choices=("dynamic", "none"), default="dynamic")
    parser.add_argument("--queue-delay-us", type=int, default=200)
    parser.add_argument(
        "--models", default="add_sub,mlp,resnet18", help=f"comma-separated, of {list(BUILDERS)}"
    )
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    args = parser.parse_args()
    reason = missing()
    if reason:
        raise SystemExit(reason)
    names = args.models.split(",")
    batched = args.batching == "dynamic"
    with tempfile.TemporaryDirectory(prefix="inferplex-triton-") as tmp:
        models = [Model(name, name, batched) for name in names]
        built = build(Path(tmp) / "onnx", models, args.queue_delay_us)
        repository = triton_repository(built, Path(tmp) / "triton")
        server = start_triton(
            repository,
            Path(tmp) / "triton.log",
            ports=(args.http_port, args.grpc_port, args.metrics_port),
        )
        print(
            f"Triton serving {', '.join(names)}: HTTP {server.http_url}, gRPC "
            f"{server.grpc_url} (pid {server.process.pid}); Ctrl-C stops it",
            flush=True,
        )
        try:
            server.process.wait()
        except KeyboardInterrupt:
            print(f"stopped: exit code {server.stop()}")


if __name__ == "__main__":
    main()
