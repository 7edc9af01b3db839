"""What a request's decoding makes the server hold beyond its body, charged to the
server-wide byte budget (``--max-buffered-bytes``) before it is allocated.

A body's own bytes are charged by the transport from arrival until its answer is sent. What
decoding it allocates on top (JSON parse trees, arrays converted from JSON or protobuf
fields, one Python ``bytes`` object per BYTES element) can be many times the body: 16 M empty
BYTES elements are 64 MB on the wire and a gigabyte as objects. So a codec estimates each
allocation from what the request declares (element counts, byte sizes) and ``charge``s it
first: a charge that would pass the budget is refused (413 when the request alone is larger
than the whole budget, else 429 / RESOURCE_EXHAUSTED: retry later), never allocated.

Only large requests are charged: the frontends open a :class:`Charge` where they decode a
body off the event loop (above ``offload.OFFLOAD_BYTES``) and release it when the request
ends; a small request's decode, on the loop, costs no accounting.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol

from inferplex.errors import InsufficientMemoryError, PayloadTooLargeError

__all__ = [
    "BYTES_ELEMENT_COST",
    "JSON_TREE_FACTOR",
    "Budget",
    "Charge",
    "charge",
    "charged",
    "charging",
]

#: memory per decoded BYTES element besides its bytes: the pointer in the object array (8),
#: the ``bytes`` object's header (33, rounded up by the allocator to 40) and the decoder's
#: int64 element bounds and lengths while it cuts the elements out (16)
BYTES_ELEMENT_COST = 64
#: memory per byte of JSON text once parsed into Python objects, in the worst usual case
#: (measured with orjson: a list of short strings or floats, 8-13x; nested empty lists, 21x)
JSON_TREE_FACTOR = 16


class Budget(Protocol):
    """The server-wide byte budget (transport.http_limits.ByteBudget): ``limit`` (0: none)
    and ``used``, shared with the transports, which update ``used`` in place."""

    limit: int
    used: int

    def freed(self, count: int) -> None: ...


class Charge:
    """The bytes one request's decoding holds in ``budget``, given back by ``release``.

    ``budget.used`` is changed by one in-place add, as the transports change it (in CPython
    an int attribute's ``+=`` is not interrupted by another thread between read and write:
    there is no eval-breaker check inside it), so a decode in a worker thread may charge
    while the loop's transports count bodies."""

    __slots__ = ("budget", "held")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.held = 0

    def take(self, count: int, what: str) -> None:
        """Charge ``count`` bytes for ``what`` (e.g. "input 'x': 1000 BYTES elements"), or
        raise: PayloadTooLargeError (413) when the request alone passes the budget,
        InsufficientMemoryError (429 / RESOURCE_EXHAUSTED) when the budget is full now."""
        budget = self.budget
        limit = budget.limit
        if limit:
            if self.held + count > limit:
                raise PayloadTooLargeError(
                    f"{what} would take about {self.held + count} bytes of memory once decoded, "
                    f"above the {limit} bytes the server holds for all requests "
                    "(INFERPLEX_MAX_BUFFERED_BYTES); send fewer elements per request"
                )
            if budget.used + count > limit:
                raise InsufficientMemoryError(
                    f"{what} would take about {count} bytes of memory once decoded, and the "
                    f"server holds {budget.used} of its {limit} bytes for requests "
                    "(INFERPLEX_MAX_BUFFERED_BYTES): retry later"
                )
        budget.used += count
        self.held += count

    def release(self) -> None:
        """The request has ended: what it held is given back (the allocator is asked to
        return large amounts to the system: ``ByteBudget.freed``)."""
        held = self.held
        if held:
            self.held = 0
            self.budget.used -= held
            self.budget.freed(held)


#: the charge of the request being decoded on this thread (a worker thread's context is a
#: copy of its caller's: ``charging`` sets it there only)
_CURRENT: ContextVar[Charge | None] = ContextVar("inferplex_decode_charge", default=None)


def charging(current: Charge | None) -> None:
    """Make ``current`` the charge of what this context decodes from now on."""
    _CURRENT.set(current)


def charged() -> bool:
    """Whether what this context decodes is charged (estimates that cost work to make are
    made only then)."""
    return _CURRENT.get() is not None


def charge(count: int, what: str, *args: object) -> None:
    """Charge ``count`` bytes about to be allocated for ``what % args`` (formatted only
    when refused: the hot path's small requests are not charged) to the request being
    decoded, if it is charged (a large request decoded off the loop); see Charge.take."""
    current = _CURRENT.get()
    if current is not None:
        current.take(count, what % args if args else what)
