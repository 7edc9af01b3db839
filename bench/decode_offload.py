"""Where decoding an inference body should leave the event loop: the codecs' time per body
by size, on the loop and through ``asyncio.to_thread``, against the cost of the hop itself.

    python -m bench.decode_offload [--repeat N] [--max-kib K]

For each body size and kind (REST JSON FP32 and BYTES, REST binary BYTES of mixed lengths,
gRPC raw BYTES and FP32; and encoding a JSON FP32 and a BYTES response) it prints the median
microseconds of one decode on a uvloop loop (``inline``: what the loop is blocked for) and of
one decode through ``asyncio.to_thread`` (``thread``: what the request waits; the loop is
free meanwhile), next to the median round trip of ``asyncio.to_thread`` on a function that
does nothing (``hop``). A body is worth a thread once decoding it inline costs at least a hop:
below that, the hop is slower than the work and the loop gains almost nothing. The last line
gives the smallest size where every kind that does work per byte costs at least one hop, and
``OFFLOAD_BYTES`` (dataplane/offload.py), the threshold the server uses. Fixed-size binary
tensors over REST are views of the body (no work at any size) and are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import orjson
import uvloop

from inferplex.dataplane.offload import OFFLOAD_BYTES
from inferplex.datatypes import serialize_bytes
from inferplex.protocol.v2 import generated as pb
from inferplex.protocol.v2 import grpc_codec, rest, rest_encode
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

#: name -> builds (function, args) whose call decodes or encodes a body of about n bytes
Maker = Callable[[int], tuple[Callable[..., Any], tuple[Any, ...]]]


def _strings(n: int) -> np.ndarray:
    """BYTES elements of 0 to 7 bytes, about ``n`` bytes once serialised."""
    lengths = np.arange(max(1, n // 8)) % 8
    return np.array([b"x" * int(k) for k in lengths] + [None], dtype=object)[:-1]


def _rest_json_fp32(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    count = max(1, n // 11)  # a random float32 takes about 11 bytes of JSON
    data = np.random.default_rng(0).random(count).astype(np.float32).tolist()
    tensor = {"name": "x", "datatype": "FP32", "shape": [count], "data": data}
    return rest.decode_infer_request, (orjson.dumps({"inputs": [tensor]}), None, "m")


def _rest_json_bytes(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    data = [item.decode() for item in _strings(n)]
    tensor = {"name": "x", "datatype": "BYTES", "shape": [len(data)], "data": data}
    return rest.decode_infer_request, (orjson.dumps({"inputs": [tensor]}), None, "m")


def _rest_binary_bytes(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    elements = _strings(n)
    raw = serialize_bytes(elements)
    tensor = {
        "name": "x",
        "datatype": "BYTES",
        "shape": [len(elements)],
        "parameters": {"binary_data_size": len(raw)},
    }
    header = orjson.dumps({"inputs": [tensor]})
    return rest.decode_infer_request, (header + raw, len(header), "m")


def _grpc(datatype: str, count: int, raw: bytes) -> bytes:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype=datatype, shape=[count])
    message.raw_input_contents.append(raw)
    return bytes(message.SerializeToString())


def _grpc_bytes(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    elements = _strings(n)
    return grpc_codec.decode_infer_request_bytes, (
        _grpc("BYTES", len(elements), serialize_bytes(elements)),
    )


def _grpc_fp32(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    count = max(1, n // 4)
    return _decode_unseen, (_grpc("FP32", count, np.ones(count, np.float32).tobytes()),)


def _decode_unseen(message: bytes) -> InferenceRequest:
    """A message as a client sends it the first time: a repeat takes the codec's layout cache
    (known_request, run on the loop at any size) and skips protobuf."""
    grpc_codec._REQUEST_LAYOUTS.clear()
    return grpc_codec.decode_infer_request_bytes(message)


def _response(datatype: str, data: np.ndarray) -> tuple[InferenceResponse, InferenceRequest]:
    output = Tensor("y", datatype, data.shape, data)
    return InferenceResponse("m", "1", [output]), InferenceRequest("m", [])


def _encode_json_fp32(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    data = np.random.default_rng(0).random(max(1, n // 4)).astype(np.float32)
    return rest_encode.encode_infer_response, _response("FP32", data)


def _encode_bytes(n: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    response, request = _response("BYTES", _strings(n))
    return grpc_codec.encode_infer_response_bytes, (response, request)


MAKERS: dict[str, Maker] = {
    "rest json fp32": _rest_json_fp32,
    "rest json bytes": _rest_json_bytes,
    "rest binary bytes": _rest_binary_bytes,
    "grpc raw bytes": _grpc_bytes,
    "grpc raw fp32": _grpc_fp32,
    "encode json fp32": _encode_json_fp32,
    "encode grpc bytes": _encode_bytes,
}


def _noop() -> None:
    return None


async def _median_us(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        if asyncio.iscoroutine(result):
            await result
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


async def measure(sizes: list[int], repeat: int) -> list[tuple[str, int, float, float]]:
    """(kind, size, inline us, thread us) per kind and size; kind 'hop' for the hop."""
    hop = await _median_us(lambda: asyncio.to_thread(_noop), repeat * 20)
    rows = [("hop", 0, 0.0, hop)]
    for kind, maker in MAKERS.items():
        for size in sizes:
            function, args = maker(size)
            reps = max(3, min(repeat, int(repeat * (65536 / size) ** 0.5)))
            inline = await _median_us(partial(function, *args), reps)
            thread = await _median_us(partial(asyncio.to_thread, function, *args), reps)
            rows.append((kind, size, inline, thread))
    return rows


def threshold(rows: list[tuple[str, int, float, float]]) -> int | None:
    """The smallest size where every kind costs at least one hop inline (fp32 over gRPC
    aside: it is a copy, far cheaper per byte, and not what blocks the loop)."""
    hop = rows[0][3]
    sizes = sorted({size for _, size, _, _ in rows[1:]})
    for size in sizes:
        costs = [i for k, s, i, _ in rows[1:] if s == size and k != "grpc raw fp32"]
        if min(costs) >= hop:
            return size
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=41, help="timed runs per size (median)")
    parser.add_argument("--max-kib", type=int, default=4096, help="largest body, in KiB")
    options = parser.parse_args()
    sizes = [1 << k for k in range(10, 31) if (1 << k) <= options.max_kib << 10]
    rows = uvloop.run(measure(sizes, options.repeat))
    print(f"asyncio.to_thread round trip (hop): {rows[0][3]:.0f} us")
    print(f"{'kind':<20}{'bytes':>10}{'inline us':>12}{'thread us':>12}{'inline/hop':>12}")
    for kind, size, inline, thread in rows[1:]:
        print(f"{kind:<20}{size:>10}{inline:>12.0f}{thread:>12.0f}{inline / rows[0][3]:>12.2f}")
    found = threshold(rows)
    print(
        f"smallest size where every kind costs a hop or more inline: {found} bytes; "
        f"OFFLOAD_BYTES is {OFFLOAD_BYTES}"
    )


if __name__ == "__main__":
    main()
