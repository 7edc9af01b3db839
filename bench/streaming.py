"""A decoupled model's responses through gRPC ModelStreamInfer against the same model
answered unary (ModelInfer), measured side by side in one run.

    python -m bench.streaming [--rounds N] [--duration S] [--grpc-server builtin|grpcio] [--quick]

The model is ``square_int32`` (examples/modelgen/decoupled.py: a Triton-style Python model
that sends ``IN`` responses from a thread of its own, then the final flag). One client, one
request at a time, on one channel (raw grpcio stubs for both ways, so the client costs the
same):

- ``unary, 1 response``: ModelInfer with IN = 1 (a decoupled model's one response);
- ``stream, 1 response``: the same request on one ModelStreamInfer stream, waiting for its
  final flag (``triton_enable_empty_final_response``) before the next;
- ``stream, 16 responses``: IN = 16 on the stream: what a model that streams tokens gets.

Per case: responses/s, and each response's latency from its request's send (p50/p99). Rounds
are interleaved; each case keeps its best round. Prints the ratios stream / unary.
"""

from __future__ import annotations

import argparse
import queue
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from examples.modelgen import decoupled
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import start_server

SERVICE = "/inference.GRPCInferenceService/"
MODEL = "square_int32"
#: (case, responses per request, streamed)
CASES = (
    ("unary, 1 response", 1, False),
    ("stream, 1 response", 1, True),
    ("stream, 16 responses", 16, True),
)


def request(count: int) -> Any:
    return pb.ModelInferRequest(
        model_name=MODEL,
        inputs=[{"name": "IN", "datatype": "INT32", "shape": [1]}],
        raw_input_contents=[np.array([count], np.int32).tobytes()],
        parameters={"triton_enable_empty_final_response": {"bool_param": True}},
    )


class Stream:
    """One ModelStreamInfer call kept open; ``ask`` sends a request and returns the arrival
    times of its responses (not of the final flag alone)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        call = channel.stream_stream(
            SERVICE + "ModelStreamInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )
        self._responses = call(iter(self._requests.get, None))

    def ask(self, message: Any) -> list[int]:
        self._requests.put(message)
        arrivals = []
        for answer in self._responses:
            if answer.error_message:
                raise RuntimeError(answer.error_message)
            response = answer.infer_response
            if response.raw_output_contents:
                arrivals.append(time.perf_counter_ns())
            if response.parameters["triton_final_response"].bool_param:
                return arrivals
        raise RuntimeError("the stream ended")

    def close(self) -> None:
        self._requests.put(None)


def measure(ask: Callable[[], list[int]], duration: float) -> tuple[float, list[float]]:
    """Responses/s and each response's latency (µs) over ``duration`` seconds."""
    latencies: list[float] = []
    responses = 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        sent = time.perf_counter_ns()
        arrivals = ask()
        responses += len(arrivals)
        latencies += [(at - sent) / 1e3 for at in arrivals]
    return responses / (time.perf_counter() - start), latencies


def cases(channel: grpc.Channel, stream: Stream) -> Iterator[tuple[str, Callable[[], list[int]]]]:
    infer = channel.unary_unary(
        SERVICE + "ModelInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )

    def unary(message: Any) -> list[int]:
        infer(message)
        return [time.perf_counter_ns()]

    for name, count, streamed in CASES:
        yield name, partial(stream.ask if streamed else unary, request(count))


def run(args: argparse.Namespace) -> None:
    repo = Path(tempfile.mkdtemp(prefix="bench_streaming_"))
    decoupled.square_int32(repo)
    server = start_server(repo, repo / "server.log", args=["--grpc-server", args.grpc_server])
    best: dict[str, tuple[float, list[float]]] = {}
    try:
        with grpc.insecure_channel(server.grpc_url) as channel:
            stream = Stream(channel)
            table = dict(cases(channel, stream))
            for ask in table.values():  # warm up: the worker process, the stream
                measure(ask, 0.2)
            for round_index in range(args.rounds):
                for name, ask in table.items():
                    rate, latencies = measure(ask, args.duration)
                    if name not in best or rate > best[name][0]:
                        best[name] = (rate, latencies)
                print(f"round {round_index + 1}/{args.rounds} done", flush=True)
            stream.close()
    finally:
        server.stop()
    report(best, args.grpc_server)


def report(best: dict[str, tuple[float, list[float]]], server: str) -> None:
    print(f"\n{MODEL} (decoupled Python model), one client, gRPC server: {server}")
    print(f"  {'case':24} {'responses/s':>12} {'p50 µs':>10} {'p99 µs':>10}")
    for name, (rate, latencies) in best.items():
        p50, p99 = np.percentile(latencies, [50, 99])
        print(f"  {name:24} {rate:12.0f} {p50:10.0f} {p99:10.0f}")
    unary = best["unary, 1 response"][0]
    for name, (rate, _) in best.items():
        if name.startswith("stream"):
            print(f"  {name} / unary: {rate / unary:.2f}x the responses/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per case and round")
    parser.add_argument("--grpc-server", default="builtin", choices=("builtin", "grpcio"))
    parser.add_argument("--quick", action="store_true", help="one short round (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.duration = 1, 0.5
    run(args)


if __name__ == "__main__":
    main()
