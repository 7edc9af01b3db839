"""The cancel board: how a handler running in a worker process learns that the caller of one
of its batch's requests went away (a closed connection, a reset stream, a deadline).

Each worker has, beside its arena, a second small anonymous shared-memory file (``memfd``):
an array of 8-byte cells, one per request a batch can hold. The server numbers the batches it
sends the worker (the "run" message carries the number). To tell batch ``n`` that its request
``i`` was cancelled, the server's event loop stores ``n`` in cell ``i``; the handler's
``is_cancelled()`` reads cell ``i`` and compares it with the number of the batch it is
running. Cells are never cleared: the number of an earlier batch never equals the current
one, so a notice that lands after its batch ended cannot mark the next batch's requests.

Why shared memory and not a message over the worker's pipe: the worker's one thread is busy
running the handler, so a message would wait for the batch to end unless a reader thread
owned the pipe, and that thread hand-over would cost every message of every batch; and the
event loop writing into a socket that the instance's thread also writes needs a lock and may
block on a full buffer. Here a notice is one aligned 8-byte store (no system call, nothing
that can block, nothing to wait for), a check is one load (it also works while the handler
holds the GIL or runs native code, since nothing in the worker has to wake up to receive
it), and while nothing is cancelled nothing happens at all: the cost on the hot path is the
batch number in the message. An aligned 8-byte store is seen whole by the other process (no
torn values on x86-64 or AArch64); a reader that looks just before it lands sees the notice
on its next look.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable

import numpy as np

CELL = np.dtype(np.uint64)


class CancelBoard:
    """The cells over a file descriptor both processes hold (see the module docstring)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map = mmap.mmap(fd, os.fstat(fd).st_size)
        self._cells = np.frombuffer(self._map, dtype=CELL)

    @classmethod
    def create(cls, slots: int) -> CancelBoard:
        """A new board for batches of up to ``slots`` requests, every cell 0 (no batch is
        numbered 0)."""
        fd = os.memfd_create("inferplex-cancel")
        os.ftruncate(fd, max(1, slots) * CELL.itemsize)
        return cls(fd)

    @property
    def slots(self) -> int:
        return len(self._cells)

    def cancel(self, batch: int, indexes: Iterable[int]) -> None:
        """Server side: the requests at ``indexes`` of batch number ``batch`` were cancelled.
        An index past the board (a batch larger than the model's maximum) is ignored."""
        cells = self._cells
        for index in indexes:
            if 0 <= index < len(cells):
                cells[index] = batch

    def cancelled(self, batch: int, index: int) -> bool:
        """Worker side: whether request ``index`` of batch number ``batch`` was cancelled."""
        cells = self._cells
        return 0 <= index < len(cells) and int(cells[index]) == batch

    def checker(self, batch: int) -> Callable[[int], bool]:
        """``cancelled`` for batch number ``batch``: request index -> bool."""
        return lambda index: self.cancelled(batch, index)

    def close(self) -> None:
        """Close the descriptor (the mapping goes with this object)."""
        os.close(self.fd)
