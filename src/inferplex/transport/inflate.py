"""Inflating a compressed request body (HTTP ``Content-Encoding``) or gRPC message within the
cap of the endpoint or method it was sent to, charged to the server's ByteBudget.

Why this shape: a 255 KB gzip message inflates to 250 MiB. How much may be inflated is the
cap of what it was sent to (``--max-small-request-bytes`` for health, metadata and the other
calls that take no or a tiny body; ``--max-request-bytes`` / ``--max-grpc-message-bytes``
for inference and loads), never the compressed size, and inflation stops one byte past it.
The inflated bytes are charged to the server-wide budget (``--max-buffered-bytes``) before
zlib makes them, a step at a time, and stay charged until the request is answered
(``Inflated.release``). Where the cap allows more than ``INLINE_INFLATE_BYTES`` the steps run
in a worker thread (zlib lets go of the GIL while it inflates), so the event loop serves other
clients meanwhile; below it, inflating costs microseconds and stays on the loop.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

from inferplex.errors import InferplexError, InvalidInputError, ServerBusyError
from inferplex.transport.compression import WBITS
from inferplex.transport.http_limits import ByteBudget

__all__ = ["INLINE_INFLATE_BYTES", "Inflated", "inflate"]

#: caps up to this size are inflated on the event loop (at most this much output, from at
#: most the compressed message, itself below the cap: tens of microseconds)
INLINE_INFLATE_BYTES = 64 << 10
#: output of one step in a worker thread: charged to the budget before it runs
STEP_BYTES = 4 << 20
#: compressed bytes handed to zlib at once (zlib copies what a step leaves unread)
_INPUT_BYTES = 1 << 20


class Inflated:
    """An inflated body or message and the bytes it holds in the budget until ``release``."""

    __slots__ = ("_budget", "charged", "data")

    def __init__(self, data: bytes | memoryview, charged: int, budget: ByteBudget) -> None:
        self.data = data
        self.charged = charged
        self._budget = budget

    def release(self) -> None:
        """The request is answered (or dropped): its inflated bytes leave the budget."""
        self._budget.used -= self.charged
        self.charged = 0


async def inflate(
    data: bytes | memoryview,
    coding: bytes,
    limit: int,
    budget: ByteBudget,
    what: str,
    too_large: Callable[[], InferplexError],
) -> Inflated:
    """``data`` inflated as ``coding`` (gzip or deflate), at most ``limit`` bytes of it:
    ``too_large()`` is raised once it would be more, InvalidInputError naming ``what`` when it
    is not valid ``coding``, ServerBusyError when the budget has no room for the next step."""
    inflater = zlib.decompressobj(WBITS[coding])
    source = memoryview(data)
    out = bytearray()
    position = 0
    charge = _Charge(budget, what)
    try:
        inline = limit <= INLINE_INFLATE_BYTES
        while not inflater.eof:
            room = min(limit + 1 - len(out), STEP_BYTES)
            charge.add(room)  # before zlib allocates it
            if inline:
                position = _step(inflater, source, position, room, out, what)
            else:
                position = await asyncio.to_thread(
                    _step, inflater, source, position, room, out, what
                )
            charge.add(len(out) - charge.total)  # gives back what the step did not use
            if len(out) > limit:
                raise too_large()
    except BaseException:
        charge.add(-charge.total)
        raise
    return Inflated(memoryview(out), charge.total, budget)


class _Charge:
    """Bytes of one inflation in the budget."""

    __slots__ = ("budget", "total", "what")

    def __init__(self, budget: ByteBudget, what: str) -> None:
        self.budget = budget
        self.total = 0
        self.what = what

    def add(self, count: int) -> None:
        budget = self.budget
        if count > 0 and 0 < budget.limit < budget.used + count:
            raise ServerBusyError(
                f"inflating {self.what} would take the request bytes the server holds past "
                f"the limit of {budget.limit} bytes (INFERPLEX_MAX_BUFFERED_BYTES); retry later"
            )
        budget.used += count
        self.total += count


def _step(
    inflater: zlib._Decompress,
    source: memoryview,
    position: int,
    room: int,
    out: bytearray,
    what: str,
) -> int:
    """Inflate into ``out`` until ``room`` more bytes are there or the stream ends; returns
    the position in ``source`` read up to. A stream that needs more than ``source`` has is
    refused."""
    target = len(out) + room
    try:
        while len(out) < target and not inflater.eof:
            chunk: bytes | memoryview = inflater.unconsumed_tail
            if not chunk and position < len(source):
                chunk = source[position : position + _INPUT_BYTES]
                position += len(chunk)
            before = len(out)
            out += inflater.decompress(chunk, target - before)
            if not chunk and len(out) == before:  # zlib waits for input there is not
                raise InvalidInputError(f"{what} could not be read: it ends before its last block")
    except zlib.error as exc:
        raise InvalidInputError(f"{what} could not be read: {exc}") from None
    return position
