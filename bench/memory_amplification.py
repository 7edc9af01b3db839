"""Peak resident memory of the server per request body, as a multiple of the body's size, for
the body kinds a client can send (binary, BYTES, JSON, gzip, gRPC), accepted and refused; the
RSS growth per attacking connection; and how far RSS comes back to its baseline afterwards.

    python -m bench.memory_amplification [--src DIR]  # about 30 s; --src: another checkout

Each request runs alone against a real ``inferplex serve`` (identity models, in-process ONNX
Runtime, so the server's RSS is all of it). Before each, the kernel's peak-RSS mark of the
server is reset (``/proc/PID/clear_refs`` 5, Linux); after it, ``VmHWM`` less the RSS before is
the request's peak. Loopback only, every request bounded (60 s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
import requests

from examples.modelgen import identity
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

MiB = 1 << 20


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _measure(server: RunningServer, send: object) -> tuple[int, int, int, str]:
    """(RSS before, peak above it, RSS kept 1.5 s after, the answer) of one ``send()``."""
    pid = server.process.pid
    before = _status(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak mark starts from now
    answer = send()  # type: ignore[operator]
    peak = _status(pid, "VmHWM") - before
    time.sleep(1.5)  # the server's trim runs after a large request ends (at most once a second)
    return before, peak, _status(pid, "VmRSS") - before, str(answer)


def _binary(datatype: str, shape: list[int], data: bytes) -> tuple[bytes, dict[str, str]]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": datatype,
                    "shape": shape,
                    "parameters": {"binary_data_size": len(data)},
                }
            ]
        }
    ).encode()
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


def _post(server: RunningServer, model: str, body: bytes, headers: dict[str, str]) -> int:
    url = f"http://{server.http_url}/v2/models/{model}/infer"
    return requests.post(url, data=body, headers=headers, timeout=60).status_code


def _grpc(server: RunningServer, message: pb.ModelInferRequest) -> str:
    with grpc.insecure_channel(
        server.grpc_url,
        options=[
            ("grpc.max_send_message_length", 1 << 30),
            ("grpc.max_receive_message_length", 1 << 30),
        ],
    ) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        try:
            infer(message, timeout=60)
        except grpc.RpcError as exc:
            return exc.code().name
        return "OK"


def _cases(server: RunningServer) -> list[tuple[str, int, object]]:
    """(name, body bytes, send) of each case."""
    fp32 = np.ones((1, 16 * MiB), np.float32).tobytes()  # 64 MiB
    octet = {"Content-Type": "application/octet-stream"}
    binary, headers = _binary("FP32", [1, 16 * MiB], fp32)
    headers.update(octet)
    zipped = gzip.compress(binary, 1)
    bomb, bomb_headers = _binary("BYTES", [1, 16 * MiB], b"\0\0\0\0" * (16 * MiB))
    bomb_headers.update(octet)
    # 1 M elements of 12 bytes: 16 MiB on the wire
    element = np.frombuffer(b"\x0c\0\0\0" + b"x" * 12, np.uint8)
    strings, string_headers = _binary("BYTES", [1, MiB], np.tile(element, MiB).tobytes())
    string_headers.update(octet)
    count = 3 * MiB
    values = ", ".join(["0.5"] * count)  # about 15 MiB of JSON
    tensor = f'"name":"INPUT0","datatype":"FP32","shape":[1,{count}]'
    json_ok = f'{{"inputs":[{{{tensor},"data":[{values}]}}]}}'.encode()
    json_big = json_ok.replace(b'"data":[', b'"data":[' + b"0.5, " * (17 * MiB))  # 100 MB
    message = pb.ModelInferRequest(model_name="identity_fp32")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16 * MiB])
    message.raw_input_contents.append(fp32)
    gzipped = {**headers, "Content-Encoding": "gzip"}
    fp32_model, bytes_model = "identity_fp32", "identity_bytes"
    return [
        ("binary FP32, accepted", len(binary), lambda: _post(server, fp32_model, binary, headers)),
        ("gzip binary FP32", len(zipped), lambda: _post(server, fp32_model, zipped, gzipped)),
        (
            "BYTES 1 M x 12 B, accepted",
            len(strings),
            lambda: _post(server, bytes_model, strings, string_headers),
        ),
        (
            "BYTES bomb 16 M empty",
            len(bomb),
            lambda: _post(server, bytes_model, bomb, bomb_headers),
        ),
        ("JSON 15 MiB", len(json_ok), lambda: _post(server, fp32_model, json_ok, {})),
        ("JSON 100 MB", len(json_big), lambda: _post(server, fp32_model, json_big, {})),
        ("gRPC raw FP32", message.ByteSize(), lambda: _grpc(server, message)),
    ]


def _connections(server: RunningServer, count: int = 200) -> tuple[int, int]:
    """RSS growth with ``count`` connections each holding a partial body (64 KiB of a
    promised 1 MiB): (before, after) in bytes."""
    pid = server.process.pid
    before = _status(pid, "VmRSS")
    head = (
        f"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {MiB}\r\n\r\n"
    ).encode()
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection((HOST, server.http_port))
            sock.sendall(head + b"\0" * (64 << 10))
            socks.append(sock)
        time.sleep(1.0)
        return before, _status(pid, "VmRSS")
    finally:
        for sock in socks:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="serve from this source folder (another checkout)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder) / "models"
        identity(repository, "FP32")
        identity(repository, "BYTES")
        env = {"INFERPLEX_MAX_REQUEST_BYTES": str(256 * MiB)}
        if args.src:
            env["PYTHONPATH"] = os.pathsep.join([args.src, os.environ.get("PYTHONPATH", "")])
        server = start_server(repository, Path(folder) / "server.log", env=env)
        try:
            time.sleep(1.0)
            baseline = _status(server.process.pid, "VmRSS")
            print(f"baseline RSS {baseline / MiB:.0f} MiB")
            print(f"{'case':34} {'body MiB':>9} {'peak MiB':>9} {'x body':>7} {'kept MiB':>9}")
            for name, size, send in _cases(server):
                _, peak, kept, answer = _measure(server, send)
                print(
                    f"{name:34} {size / MiB:9.1f} {peak / MiB:9.0f} {peak / size:7.1f} "
                    f"{kept / MiB:9.0f}  {answer}"
                )
            time.sleep(2.0)
            after = _status(server.process.pid, "VmRSS")
            grown = (after - baseline) / MiB
            print(f"RSS 2 s after the last request: {after / MiB:.0f} MiB ({grown:+.0f} MiB)")
            before, held = _connections(server)
            each = (held - before) / 200 / 1024
            print(f"200 connections with 64 KiB partial bodies: {each:.0f} KiB RSS each")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
