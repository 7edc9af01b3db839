"""Requests built from named arrays, encoded once before the clock starts, and checks of the
values answered: for the benchmarks that know their models and their answers (``bench/``)
and the deploy tests' clients. A benchmark's client then only writes bytes.

The encodings and decoders are :mod:`inferplex_tools.benchtool.payloads`' (those ``inferplex
bench`` sends): HTTP/1.1 requests as complete byte strings (JSON, or Triton's binary tensor
extension with outputs asked in binary) and serialised gRPC ``ModelInferRequest`` messages
with raw contents. Decoders are used on samples only, to check that the server answered
correctly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from inferplex.datatypes import v2_datatype
from inferplex_tools.benchtool import payloads
from inferplex_tools.benchtool.clients import RequestFailed
from inferplex_tools.benchtool.payloads import Arrays, TensorPlan

__all__ = [
    "Arrays",
    "BadResponse",
    "check_outputs",
    "decode_grpc_response",
    "decode_http_response",
    "grpc_request",
    "http_binary_request",
    "http_json_request",
]

#: the server answered, but not with a correct inference response
BadResponse = RequestFailed


def _plans(inputs: Arrays) -> list[TensorPlan]:
    return [
        TensorPlan(name, v2_datatype(array.dtype), tuple(array.shape))
        for name, array in inputs.items()
    ]


def http_json_request(host: str, model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """An inference request with every tensor as a JSON list."""
    return payloads.http_request(host, model, "", _plans(inputs), inputs, outputs, binary=False)


def http_binary_request(host: str, model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """An inference request in Triton's binary tensor extension, outputs asked in binary."""
    return payloads.http_request(host, model, "", _plans(inputs), inputs, outputs, binary=True)


def grpc_request(model: str, inputs: Arrays, outputs: Sequence[str]) -> bytes:
    """A serialised ``inference.ModelInferRequest`` with raw input contents."""
    return payloads.grpc_request(model, "", _plans(inputs), inputs, outputs)


def decode_http_response(head: bytes, body: bytes) -> dict[str, np.ndarray]:
    """Outputs of a successful HTTP inference response, JSON or binary."""
    return {name: array for name, (_, array) in payloads.decode_http(head, body).items()}


def decode_grpc_response(message: bytes) -> dict[str, np.ndarray]:
    """Outputs of a serialised ``inference.ModelInferResponse``."""
    return {name: array for name, (_, array) in payloads.decode_grpc(message).items()}


def check_outputs(
    got: Mapping[str, np.ndarray], expected: Arrays, what: str, atol: float = 0.0
) -> None:
    """Raise BadResponse unless ``got`` holds every expected output with the expected values."""
    for name, want in expected.items():
        if name not in got:
            raise BadResponse(f"{what}: output {name} missing (got {sorted(got)})")
        if got[name].shape != want.shape or not np.allclose(got[name], want, rtol=0, atol=atol):
            raise BadResponse(f"{what}: output {name} is {got[name]!r}, expected {want!r}")
