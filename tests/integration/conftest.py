"""Integration-test housekeeping."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def collect_clients_here() -> Iterator[None]:
    """Collect garbage after each test, on the main thread. A tritonclient HTTP client that a
    test dropped without close() must be collected on the thread that made it (its gevent hub
    refuses any other); left to chance, the collection can happen in a later test's worker
    thread and fail that test with an unraisable InvalidThreadUseError."""
    yield
    gc.collect()
