"""The server's own HTTP/1.1 server against uvicorn, side by side, in one run.

    python -m bench.http_server [--duration S] [--rounds N] [--quick]

DESIGN.md chose raw ASGI on uvicorn + uvloop + httptools by measurement; inferplex now serves
its ASGI app with ``inferplex.transport.http_server`` instead. This benchmark keeps that choice
honest: it starts two child processes that serve the same app over the same engine and the
same model repository (add_sub, dynamically batched), one with uvicorn (``pip install
uvicorn``) and one with the built-in server, and drives both alternately with the same cheap
keep-alive clients:

- ``live``: ``GET /v2/health/live``, the cost of HTTP alone;
- ``infer``: add_sub over the binary tensor extension, at concurrency 1 and 16.

Per case it prints, for each server, requests/s, p50 latency and the child's CPU time per
request (user + system, psutil), then built-in / uvicorn ratios (CPU per request: lower is
better). Rounds alternate the order of the two servers; each case keeps its best round.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import psutil

from bench.loadgen import Measurement, measure, open_http
from bench.overhead import Timing, add_round_options, round_options
from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool import arrays

HOST = "127.0.0.1"
SERVERS = ("uvicorn", "builtin")
CASES = (("live", 16), ("infer", 1), ("infer", 16))


async def _serve(kind: str, repo: Path, sock: socket.socket) -> None:
    """The child: the inferplex HTTP app over an engine, served by ``kind`` on ``sock``."""
    from inferplex.config.server_config import ServerConfig
    from inferplex.frontends.http import create_http_app
    from inferplex.server import build_engine
    from inferplex.transport.http_server import HttpServer
    from inferplex.transport.listener import ListenerSpec

    config = ServerConfig(model_repository=repo, log_level="warning")
    engine = build_engine(config)
    await engine.start()
    app = create_http_app(engine, config)
    if kind == "builtin":
        server = HttpServer(app, ListenerSpec.from_config(config))
        await server.start(sock)
        print("ready", flush=True)
        await asyncio.Event().wait()
    import uvicorn

    from inferplex.transport.asgi import AsgiAdapter

    settings = uvicorn.Config(
        AsgiAdapter(app, config.max_request_bytes),
        loop="none",
        http="httptools",
        lifespan="off",
        log_level="warning",
        access_log=False,
    )
    print("ready", flush=True)
    await uvicorn.Server(settings).serve(sockets=[sock])


def child_main(kind: str, repo: Path, fd: int) -> None:
    import uvloop

    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    uvloop.run(_serve(kind, repo, sock))


class Child:
    """One server process listening on a socket this process opened (so its port is known)."""

    def __init__(self, kind: str, repo: Path) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        fd = str(self.sock.fileno())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.http_server", "--child", kind, str(repo), fd],
            pass_fds=[self.sock.fileno()],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {kind} server did not start")
        self._ps = psutil.Process(self.process.pid)

    def cpu(self) -> float:
        times = self._ps.cpu_times()
        return times.user + times.system

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.sock.close()


def requests() -> dict[str, tuple[bytes, arrays.Arrays | None]]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, dtype=np.float32)
    expected = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    infer = arrays.http_binary_request(HOST, "add_sub", {"INPUT0": a, "INPUT1": b}, list(expected))
    live = f"GET /v2/health/live HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    return {"live": (live, None), "infer": (infer, expected)}


async def run_case(
    child: Child, request: bytes, expected: arrays.Arrays | None, clients: int, timing: Timing
) -> Measurement:
    connections = await open_http(HOST, child.port, clients)
    try:
        head, body = await connections[0].send(request)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{child.kind}: {head[:40]!r}: {body[:200]!r}")
        if expected is not None:
            outputs = arrays.decode_http_response(head, body)
            arrays.check_outputs(outputs, expected=expected, what=child.kind)
        calls = [partial(c.send, request) for c in connections]
        return await measure(calls, timing.duration, timing.warmup, child.cpu)
    finally:
        for connection in connections:
            connection.close()


async def run_rounds(children: list[Child], rounds: int, timing: Timing) -> dict[str, Measurement]:
    """Every case on every server, ``rounds`` times, alternating which server goes first."""
    best: dict[str, Measurement] = {}
    all_requests = requests()
    for number in range(rounds):
        print(f"round {number + 1}/{rounds}", flush=True)
        order = children if number % 2 == 0 else children[::-1]
        for name, clients in CASES:
            request, expected = all_requests[name]
            for child in order:
                key = f"{name}/c{clients}/{child.kind}"
                measured = await run_case(child, request, expected, clients, timing)
                if key not in best or measured.rate > best[key].rate:
                    best[key] = measured
    return best


def cpu_us(measured: Measurement) -> float:
    assert measured.server_cpu_seconds is not None
    return measured.server_cpu_seconds / measured.requests * 1e6


def print_table(best: dict[str, Measurement]) -> None:
    print(f"\n{'case':<12}{'server':<9}{'req/s':>9}{'p50 ms':>9}{'CPU µs/req':>12}")
    for name, clients in CASES:
        case = f"{name}/c{clients}"
        for kind in SERVERS:
            m = best[f"{case}/{kind}"]
            print(f"{case:<12}{kind:<9}{m.rate:>9.0f}{m.percentile_ms(50):>9.3f}{cpu_us(m):>12.1f}")
    print("\nbuilt-in / uvicorn (req/s: higher is better; CPU per request: lower is better)")
    for name, clients in CASES:
        case = f"{name}/c{clients}"
        ours, theirs = best[f"{case}/builtin"], best[f"{case}/uvicorn"]
        print(
            f"{case:<12}req/s {ours.rate / theirs.rate:.2f}x   "
            f"p50 {ours.percentile_ms(50) / theirs.percentile_ms(50):.2f}x   "
            f"CPU/req {cpu_us(ours) / cpu_us(theirs):.2f}x"
        )


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child_main(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description="built-in HTTP server vs uvicorn")
    add_round_options(parser, duration=1.5, warmup=0.5, rounds=5)
    rounds, timing = round_options(parser.parse_args(), quick=Timing(0.5, 0.2))
    with tempfile.TemporaryDirectory(prefix="inferplex-bench-") as tmp:
        repo = Path(tmp) / "models"
        path = modelgen.add_sub(repo)
        config = modelgen.model_config(
            path, max_batch_size=8, instance_kind="KIND_CPU", dynamic_batching=True
        )
        write_config(path.parent.parent, config)
        children = [Child(kind, repo) for kind in SERVERS]
        try:
            import uvloop

            best = uvloop.run(run_rounds(children, rounds, timing))
        finally:
            for child in children:
                child.close()
    print_table(best)


if __name__ == "__main__":
    main()
