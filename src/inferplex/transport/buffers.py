"""Buffers that request bodies are read into, in place, by the HTTP and gRPC servers."""

from __future__ import annotations

import numpy as np


def uninitialised(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes, not zeroed: a body is read into it from the
    socket, and no byte is seen before it has been read (zeroing a bytearray of 600 KB takes
    about 9 µs of the event loop, and touches every page before the kernel does)."""
    return np.empty(size, np.uint8).data
