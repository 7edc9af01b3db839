"""The conformance suites' server and connections (tests/support/h2raw.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.h2raw import Conn, Served, serving


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving() as server:
        yield server


@pytest.fixture
def conn(served: Served) -> Iterator[Conn]:
    with Conn(served.port) as connection:
        connection.handshake()
        yield connection
