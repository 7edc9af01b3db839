"""A well-behaved gRPC client never hangs and never loses its connection (issue 30), on the
built-in server and on its grpcio twin: large calls at once on one channel (more than the
connection's buffer limit holds) all complete, a burst of calls above the stream limit
waits or is retried stream by stream, and a streaming call's messages may be larger than
any window."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.conftest import TWINS

MIB = 1 << 20
#: the connection buffer limit here: 3 MiB messages, one at a time; the streams limit: a
#: burst of calls goes past it; the control-frame burst: scaled down with the streams (the
#: issue's 1,500 calls against 1,024 streams and a burst of 1,000)
CONNECTION_BUFFER = 4 * MIB
MAX_STREAMS = 64
MAX_CONTROL_FRAMES = 50


@pytest.fixture(scope="module", params=list(TWINS))
def twin(
    request: pytest.FixtureRequest, test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, RunningServer]]:
    """(which twin, its server)"""
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in TWINS[request.param].items()}
    running = start_server(
        test_repository,
        tmp_path_factory.mktemp("logs") / "server.log",
        env={
            **settings,
            "INFERPLEX_HTTP2_CONNECTION_BUFFER_BYTES": str(CONNECTION_BUFFER),
            "INFERPLEX_HTTP2_MAX_CONCURRENT_STREAMS": str(MAX_STREAMS),
            "INFERPLEX_HTTP2_MAX_CONTROL_FRAMES": str(MAX_CONTROL_FRAMES),
        },
    )
    yield request.param, running
    running.stop()


def _input(values: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("INPUT0", [1, values.size], "FP32")
    tensor.set_data_from_numpy(values.reshape(1, -1))
    return tensor


def _large_calls_at_once(url: str, count: int, size: int, timeout: float = 60.0) -> list[str]:
    """``count`` calls of ``size`` bytes each, all started before any ends, on one channel;
    the errors."""
    client = grpcclient.InferenceServerClient(url)
    values = np.arange(size // 4, dtype=np.float32)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    try:
        for _ in range(count):
            client.async_infer(
                "identity_fp32",
                [_input(values)],
                lambda result, error: answers.put((result, error)),
                client_timeout=timeout,
            )
        errors = []
        for _ in range(count):
            result, error = answers.get(timeout=timeout + 10)
            if error is not None:
                errors.append(str(error))
            else:
                assert np.array_equal(result.as_numpy("OUTPUT0")[0], values)  # type: ignore[attr-defined]
        return errors
    finally:
        client.close()


def test_large_calls_at_once_past_the_connection_limit_all_complete(
    twin: tuple[str, RunningServer],
) -> None:
    """Issue 30: of two 32 MiB calls on one connection the second never finished (no
    WINDOW_UPDATE, RST or GOAWAY). Six 3 MiB calls against a 4 MiB connection limit: they
    take turns for room, each held back by its own window."""
    assert _large_calls_at_once(twin[1].grpc_url, 6, 3 * MIB) == []


@pytest.fixture(scope="module")
def defaults(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The built-in server with the default limits."""
    running = start_server(test_repository, tmp_path_factory.mktemp("logs") / "server.log")
    yield running
    running.stop()


def test_four_32_mib_calls_at_once_with_the_default_limits(defaults: RunningServer) -> None:
    """The issue's case as it was reported: the default limits (64 MiB a connection)."""
    assert _large_calls_at_once(defaults.grpc_url, 4, 32 * MIB) == []


def test_1500_calls_at_once_with_the_default_limits(defaults: RunningServer) -> None:
    """The issue's case as it was reported: 1,024 streams, a burst of 1,000 control frames."""
    for _ in range(3):
        assert asyncio.run(_calls_at_once(defaults.grpc_url, 1500)) == []


async def _calls_at_once(url: str, count: int) -> list[str]:
    client = aioclient.InferenceServerClient(url)
    values = np.ones((1, 16), np.float32)
    tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(values)
    try:
        results = await asyncio.gather(
            *[client.infer("identity_fp32", [tensor], client_timeout=60) for _ in range(count)],
            return_exceptions=True,
        )
    finally:
        await client.close()
    return [str(result) for result in results if isinstance(result, BaseException)]


def test_a_burst_of_calls_above_the_stream_limit_all_complete(
    twin: tuple[str, RunningServer],
) -> None:
    """Issue 30: 1,500 calls at once on one tritonclient channel got GOAWAY
    ENHANCE_YOUR_CALM ("too many frames that do no work") in 7 runs of 8, losing 581-1,427
    calls. Each call's HEADERS come with a WINDOW_UPDATE; the calls above the stream limit
    (64 here) wait in the client or are refused stream by stream, never the connection."""
    if twin[0] == "reference":
        # grpc-core's server refuses the calls past its limit with REFUSED_STREAM that the
        # client does not retry: 0-833 calls of 1,500 fail (docs/security.md)
        pytest.xfail("grpcio's server fails the calls above its stream limit")
    for _ in range(3):
        assert asyncio.run(_calls_at_once(twin[1].grpc_url, 1500)) == []


def test_a_streamed_message_larger_than_any_window(twin: tuple[str, RunningServer]) -> None:
    """A streaming call's message larger than the stream's window (a message is given back
    to the window only once taken whole) arrives: the window opens for the rest of it."""
    values = np.arange(3 * MIB // 4, dtype=np.float32)
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client = grpcclient.InferenceServerClient(twin[1].grpc_url)
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for _ in range(3):
            client.async_stream_infer("identity_fp32", [_input(values)])
        for _ in range(3):
            result, error = answers.get(timeout=30)
            assert error is None, error
            assert np.array_equal(result.as_numpy("OUTPUT0")[0], values)  # type: ignore[attr-defined]
        client.stop_stream()
    finally:
        client.close()
