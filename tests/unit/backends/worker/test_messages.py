"""The worker protocol's messages on the wire: each one, nested messages included, comes
back equal to what was sent, through a real socket pair."""

from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Connection

import pytest

from inferplex.backends.worker import messages as m
from inferplex.errors import ErrorCode

HEADERS = [("INPUT0", "<f4", (1, 16), 0, 64)]
FAILURE = m.Failure(ErrorCode.INVALID_ARGUMENT, "bad input")
CALL = m.Call("other", "", HEADERS, ["OUT"], 1.5)

SAMPLES = [
    m.Init({"model_file": "/m/1/model.py"}),
    m.RunBatch(HEADERS, ["OUT"], (m.RequestInfo(3, "id", {"k": 1}, 2),), 7),
    m.RunBatch(HEADERS, ["OUT"]),
    m.CallAnswers((m.CallAnswer(HEADERS), m.CallAnswer(None, FAILURE))),
    m.StreamOpened(4),
    m.StreamItem(None, m.Failure(ErrorCode.UNAVAILABLE, "stopped", stopped=True), True),
    m.StreamItem(HEADERS, None, False),
    m.Sent(True),
    m.Stop(),
    m.Ready(),
    m.LoadFailed("ImportError: no module"),
    m.BatchDone(HEADERS, (m.RequestFailed(1, FAILURE),)),
    m.BatchFailed(FAILURE),
    m.Calls((CALL, CALL)),
    m.StreamOpen(CALL),
    m.StreamNext(4),
    m.StreamCancel(4),
    m.Response(9, HEADERS, False),
    m.Response(9, None, True, FAILURE),
    m.MetricUpdates([("counter", "n", "d", (), 1.0)]),
    m.MetricUpdates([]),
]


@pytest.fixture
def wires() -> tuple[m.Wire, m.Wire]:
    ours, theirs = socket.socketpair()
    return m.Wire(Connection(ours.detach())), m.Wire(Connection(theirs.detach()))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_each_message_crosses_the_wire_unchanged(
    wires: tuple[m.Wire, m.Wire], sample: object
) -> None:
    server, worker = wires
    server.send(sample)
    received = worker.recv()
    assert type(received) is type(sample) and received == sample
    server.close()
    worker.close()


def test_on_the_wire_a_message_is_a_plain_tuple() -> None:
    """No class is pickled: its number and fields only (a nested message: its fields)."""
    wire = m.pack(m.BatchDone(HEADERS, (m.RequestFailed(1, FAILURE),)))
    assert type(wire) is tuple and wire[1:] == (HEADERS, ((1, tuple(FAILURE)),), ())
    assert type(wire[2][0]) is tuple and type(wire[2][0][1]) is tuple
    assert type(m.pack(m.Sent(True))) is tuple


def test_a_message_equals_only_messages_of_its_class() -> None:
    """They are tuples, but ``Stop() == Ready()`` or ``Sent(True) == StreamOpened(1)`` must
    not hold."""
    assert m.Stop() != m.Ready() and not m.Stop().__eq__(m.Ready())
    assert m.Sent(True) != m.StreamOpened(1) and m.Sent(True) != (True,)
    assert m.Sent(True) == m.Sent(True) and hash(m.Sent(True)) == hash(m.Sent(True))


def test_messages_are_frozen() -> None:
    with pytest.raises(AttributeError):
        m.Sent(True).alive = False  # type: ignore[misc]


def test_defaults_are_taken_as_declared() -> None:
    batch = m.RunBatch(HEADERS, ["OUT"])
    assert (batch.requests, batch.number) == ((), 0)
    with pytest.raises(TypeError):
        m.Sent()  # type: ignore[call-arg]


def test_a_message_larger_than_the_socket_buffer_crosses_in_parts(
    wires: tuple[m.Wire, m.Wire],
) -> None:
    """``Wire`` writes and reads its frames itself: one larger than the socket holds goes
    out in several writes while the other end reads it in several reads."""
    server, worker = wires
    big = m.Init({"config": "x" * (8 << 20)})
    sender = threading.Thread(target=server.send, args=(big,))
    sender.start()
    assert worker.recv() == big
    sender.join()
    server.close()
    worker.close()


def test_the_frames_are_multiprocessing_connections(wires: tuple[m.Wire, m.Wire]) -> None:
    """A ``Connection`` at the other end reads them (the framing is the same)."""
    server, worker = wires
    server.send(m.StreamNext(4))
    assert m.unpack(worker.connection.recv()) == m.StreamNext(4)
    worker.connection.send(m.pack(m.Sent(True)))
    assert server.recv() == m.Sent(True)


def test_a_closed_other_end_is_an_eof_error(wires: tuple[m.Wire, m.Wire]) -> None:
    server, worker = wires
    server.close()
    with pytest.raises(EOFError):
        worker.recv()
    worker.close()
    with pytest.raises(OSError):  # and a closed wire reads nothing, not another file
        worker.recv()
