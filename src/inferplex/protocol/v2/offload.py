"""Decoding and encoding large inference bodies off the event loop.

Turning a large body into tensors (parsing JSON, cutting BYTES elements, reading a large
tensor from shared memory) or tensors into one (formatting JSON, copying raw data) takes
milliseconds to seconds; on the event loop, that freezes every other client of the server,
health checks included. Above ``OFFLOAD_BYTES`` of work the codec runs in a worker thread
and the loop goes on serving; below it the thread hop would cost more than the work, so small
requests (the hot path) stay on the loop. A small body that names a larger tensor in shared
memory is found out while decoding on the loop (``ReadOffLoop``) and decoded again in a
thread.

Off the loop, each input's declared name, datatype and shape are checked (the data plane's
``checks``: the limits, then the model's inputs) before its data is decoded, so a body the
model would refuse costs no decoding; on the loop the engine's checks after decoding are as
cheap. Either way the decoded request is admitted by the data plane (``plane.admit``) on the
thread that decoded it.
"""

from __future__ import annotations

import asyncio

from inferplex.protocol.dataplane import DataPlane
from inferplex.protocol.v2 import grpc_codec, rest
from inferplex.shm.registry import ReadOffLoop, Regions
from inferplex.types import InferenceRequest, InferenceResponse

__all__ = [
    "OFFLOAD_BYTES",
    "decode_grpc",
    "decode_grpc_here",
    "decode_rest",
    "decode_rest_here",
    "encode_grpc",
    "encode_grpc_here",
    "encode_rest",
    "encode_rest_here",
    "rest_work",
]

#: bytes of work from which a body is decoded or encoded in a worker thread. Measured with
#: bench/decode_offload.py: a hop through asyncio.to_thread takes about 25-35 us, what
#: decoding 8-16 KiB of JSON numbers or strings, or 1-2 KiB of binary BYTES elements, takes
#: on the loop. Above 16 KiB every codec costs more than a hop; a fixed-size binary tensor
#: (viewed in place) is no work at any size.
OFFLOAD_BYTES = 16 << 10


def rest_work(body: bytes | memoryview, header_length: int | None) -> int:
    """How many bytes of a REST body cost decoding work: the JSON, and the binary data when
    the header names a BYTES input (fixed-size binary tensors are viewed in place, free)."""
    size = len(body)
    if header_length is None or header_length >= size:
        return size
    header = body[:header_length]
    if b'"BYTES"' in (header.tobytes() if isinstance(header, memoryview) else header):
        return size
    return header_length


def decode_rest_here(
    body: bytes | memoryview,
    header_length: int | None,
    model: str,
    version: str,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest | None:
    """The request of a body whose work is small, decoded and admitted on the caller's
    thread; None for one that :func:`decode_rest` should decode in a worker thread. (The
    hot path calls this first: no coroutine to create and await for a small request.)"""
    if len(body) <= OFFLOAD_BYTES or rest_work(body, header_length) <= OFFLOAD_BYTES:
        # at most OFFLOAD_BYTES of JSON: far below what pauses the garbage collector
        try:
            request = rest.decode_body(
                body, header_length, model, version, None if shm is None else shm.on_loop
            )
        except ReadOffLoop:  # a large tensor in shared memory: read it in a worker thread
            return None
        plane.admit(request)
        return request
    return None


async def decode_rest(
    body: bytes | memoryview,
    header_length: int | None,
    model: str,
    version: str,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest:
    """``rest.decode_infer_request`` and ``plane.admit``, off the loop for a large body."""
    request = decode_rest_here(body, header_length, model, version, shm, plane)
    if request is not None:
        return request
    return await asyncio.to_thread(_decode_rest, body, header_length, model, version, shm, plane)


def _decode_rest(
    body: bytes | memoryview,
    header_length: int | None,
    model: str,
    version: str,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest:
    request = rest.decode_infer_request(body, header_length, model, version, shm, plane.checks)
    plane.admit(request)
    return request


def decode_grpc_here(
    message: bytes | bytearray | memoryview,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest | None:
    """The request in a small message, or one of a layout seen before (fixed-size raw
    tensors, viewed in place: no work at any size), decoded and admitted on the caller's
    thread; None for one that :func:`decode_grpc` should decode in a worker thread."""
    if len(message) <= OFFLOAD_BYTES:  # (it looks for a known layout first)
        try:
            request = grpc_codec.decode_infer_request_bytes(
                message, None if shm is None else shm.on_loop
            )
        except ReadOffLoop:  # a large tensor in shared memory: read it in a worker thread
            return None
    else:
        known = grpc_codec.known_request(message)
        if known is None:
            return None
        request = known
    plane.admit(request)
    return request


async def decode_grpc(
    message: bytes | bytearray | memoryview,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest:
    """``grpc_codec.decode_infer_request_bytes`` and ``plane.admit``, off the loop for a
    large message (protobuf copies every byte of it) unless it is of a layout seen before."""
    request = decode_grpc_here(message, shm, plane)
    if request is not None:
        return request
    return await asyncio.to_thread(_decode_grpc, message, shm, plane)


def _decode_grpc(
    message: bytes | bytearray | memoryview,
    shm: Regions | None,
    plane: DataPlane,
) -> InferenceRequest:
    request = grpc_codec.decode_infer_request_bytes(message, shm, plane.checks)
    plane.admit(request)
    return request


def small_response(response: InferenceResponse) -> bool:
    """Whether encoding ``response`` is little enough work to do on the loop: at most
    ``OFFLOAD_BYTES`` of output data (a BYTES element counts as 8, a pointer)."""
    total = 0
    try:
        for tensor in response.outputs:
            total += tensor.data.nbytes
    except AttributeError:  # not an array: the codec makes one of it
        return False
    return total <= OFFLOAD_BYTES


def encode_rest_here(
    response: InferenceResponse, request: InferenceRequest, shm: Regions | None
) -> tuple[bytes, int | None] | None:
    """``rest.encode_infer_response`` of small outputs, on the caller's thread; None for
    large ones (:func:`encode_rest`)."""
    if small_response(response):
        return rest.encode_infer_response(response, request, shm)
    return None


async def encode_rest(
    response: InferenceResponse, request: InferenceRequest, shm: Regions | None
) -> tuple[bytes, int | None]:
    """``rest.encode_infer_response``, off the loop for large outputs."""
    if small_response(response):
        return rest.encode_infer_response(response, request, shm)
    return await asyncio.to_thread(rest.encode_infer_response, response, request, shm)


def encode_grpc_here(
    response: InferenceResponse, request: InferenceRequest, shm: Regions | None
) -> bytes | None:
    """``grpc_codec.encode_infer_response_bytes`` of small outputs, on the caller's thread;
    None for large ones (:func:`encode_grpc`)."""
    if small_response(response):
        return grpc_codec.encode_infer_response_bytes(response, request, shm)
    return None


async def encode_grpc(
    response: InferenceResponse, request: InferenceRequest, shm: Regions | None
) -> bytes:
    """``grpc_codec.encode_infer_response_bytes``, off the loop for large outputs."""
    if small_response(response):
        return grpc_codec.encode_infer_response_bytes(response, request, shm)
    return await asyncio.to_thread(grpc_codec.encode_infer_response_bytes, response, request, shm)
