"""Health latency under compression bombs (issue 30's critical finding), bounded in time.

One unauthenticated attacker sends gzip bombs back to back from two threads on loopback:
255 KB that inflate to 250 MiB, to gRPC ServerLive and grpc.health.v1.Health/Check (each
thread its own connection, raw HTTP/2), and to HTTP GET /v2/health/live with
``Content-Encoding: gzip``. Meanwhile another client polls /v2/health/live on its own
keep-alive connection; the script prints its p50/p99/max and the server's peak RSS growth.

    python -m bench.compression_bomb [--seconds 15] [--http-server uvicorn --grpc-server grpcio]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import socket
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import StreamEnded, StreamReset

from examples import modelgen
from inferplex_tools.benchtool.launch import HOST, start_server

BOMB = gzip.compress(bytes(250 << 20), 9)
PATHS = ("/inference.GRPCInferenceService/ServerLive", "/grpc.health.v1.Health/Check")


def grpc_attacker(port: int, path: str, stop: threading.Event, sent: list[int]) -> None:
    """Bombs on one HTTP/2 connection, one stream after another, each answered first."""
    sock = socket.create_connection((HOST, port), timeout=30)
    conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    conn.update_settings({3: 1024})
    sock.sendall(conn.data_to_send())
    frame = b"\x01" + len(BOMB).to_bytes(4, "big") + BOMB
    while not stop.is_set():
        stream = conn.get_next_available_stream_id()
        headers = [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
            (b":authority", b"bomb"), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"grpc-encoding", b"gzip"),
        ]  # fmt: skip
        conn.send_headers(stream, headers)
        view, done = memoryview(frame), False
        while not done:
            room = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
            if view and room > 0:
                conn.send_data(stream, view[:room].tobytes(), end_stream=len(view) <= room)
                view = view[room:]
                sock.sendall(conn.data_to_send())
                continue
            data = sock.recv(1 << 16)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, StreamEnded | StreamReset) and event.stream_id == stream:
                    done = True
            sock.sendall(conn.data_to_send())
        sent[0] += 1


def http_attacker(port: int, stop: threading.Event, sent: list[int]) -> None:
    head = (
        f"GET /v2/health/live HTTP/1.1\r\nHost: bomb\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(BOMB)}\r\n\r\n"
    ).encode()
    while not stop.is_set():
        # refused before the body: the server may stop reading and close
        with (
            socket.create_connection((HOST, port), timeout=30) as sock,
            contextlib.suppress(OSError),
        ):
            sock.sendall(head + BOMB)
            sock.recv(4096)
        sent[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--http-server", default="builtin")
    parser.add_argument("--grpc-server", default="builtin")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        modelgen.add_sub(repo)
        env = {
            "INFERPLEX_INFERENCE_TOKEN": "t",
            "INFERPLEX_MANAGEMENT_TOKEN": "m",
            "INFERPLEX_HTTP_SERVER": options.http_server,
            "INFERPLEX_GRPC_SERVER": options.grpc_server,
        }
        server = start_server(repo, repo / "server.log", env=env)
        try:
            run(server, options.seconds)
        finally:
            server.stop()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return 0.0


def run(server: object, seconds: float) -> None:
    pid = server.process.pid  # type: ignore[attr-defined]
    before = peak_rss_mb(pid)
    stop = threading.Event()
    counts: list[list[int]] = [[0] for _ in range(4)]
    threads = [
        threading.Thread(target=grpc_attacker, args=(server.grpc_port, path, stop, counts[i]))  # type: ignore[attr-defined]
        for i, path in enumerate(PATHS)
    ]
    threads += [
        threading.Thread(target=http_attacker, args=(server.http_port, stop, counts[2 + i]))  # type: ignore[attr-defined]
        for i in range(2)
    ]
    for thread in threads:
        thread.daemon = True
        thread.start()
    latencies = []
    request = b"GET /v2/health/live HTTP/1.1\r\nHost: probe\r\n\r\n"
    deadline = time.monotonic() + seconds
    with socket.create_connection((HOST, server.http_port), timeout=30) as sock:  # type: ignore[attr-defined]
        while time.monotonic() < deadline:
            start = time.perf_counter()
            sock.sendall(request)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(4096)
            latencies.append(time.perf_counter() - start)
            time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join(30)
    ms = np.array(latencies) * 1000
    print(
        f"bombs sent: gRPC ServerLive {counts[0][0]}, Health/Check {counts[1][0]}, "
        f"HTTP health {counts[2][0] + counts[3][0]} (two threads each kind)"
    )
    print(
        f"/v2/health/live under attack: {len(ms)} answers, p50 {np.percentile(ms, 50):.1f} ms, "
        f"p99 {np.percentile(ms, 99):.1f} ms, max {ms.max():.1f} ms"
    )
    print(f"server peak RSS grew {peak_rss_mb(pid) - before:.0f} MiB")


if __name__ == "__main__":
    main()
