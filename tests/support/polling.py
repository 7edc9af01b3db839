"""Waiting for something a server does in its own time: polled with a deadline, never
slept on."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Until ``condition()`` is true (an OSError or ValueError counts as not yet: a file
    not written yet, or half written)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError("the condition never held")
