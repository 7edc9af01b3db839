"""Where a call's work runs: decoding a large body (parsing JSON, cutting BYTES elements,
reading a large tensor from shared memory) or encoding a large answer takes milliseconds to
seconds, which on the event loop would freeze every other client, health checks included.
Above ``OFFLOAD_BYTES`` of work the data plane runs the codec in a worker thread; below it
the hop would cost more than the work, so small calls (the hot path) stay on the loop."""

from __future__ import annotations

from inferplex.types import InferenceResponse

__all__ = ["OFFLOAD_BYTES", "small_response"]

#: bytes of work from which a body is decoded or an answer encoded in a worker thread.
#: Measured with bench/decode_offload.py: a hop through asyncio.to_thread takes about 25-35 us,
#: what decoding 8-16 KiB of JSON numbers or strings, or 1-2 KiB of binary BYTES elements,
#: takes on the loop. Above 16 KiB every codec costs more than a hop; a fixed-size binary
#: tensor (viewed in place) is no work at any size.
OFFLOAD_BYTES = 16 << 10


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
