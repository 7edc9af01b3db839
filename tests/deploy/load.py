"""Closed-loop HTTP and gRPC clients that count every answer and record every failure.

Unlike the benchmarks' ``bench.loadgen.measure``, which stops at the first failure, these
clients go on after one (reconnecting where needed), so a test sees all the failures of a
rolling restart. They run on an event loop in a thread of their own, leaving the test's
thread free to restart servers.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc
import numpy as np
import uvloop

from inferplex_tools.benchtool.arrays import (
    BadResponse,
    check_outputs,
    decode_grpc_response,
    decode_http_response,
    grpc_request,
    http_binary_request,
    http_json_request,
)
from inferplex_tools.benchtool.clients import HttpConnection, grpc_infer
from inferplex_tools.benchtool.payloads import header_value

_A = np.arange(16, dtype=np.float32).reshape(1, 16)
_B = np.full((1, 16), 2.0, dtype=np.float32)
ADD_SUB_INPUTS = {"INPUT0": _A, "INPUT1": _B}
ADD_SUB_OUTPUTS = {"OUTPUT0": _A + _B, "OUTPUT1": _A - _B}
SLOW_INPUTS = {"INPUT0": np.array([[5.0]], dtype=np.float32)}


@dataclass(frozen=True)
class Failure:
    """One failed request: its kind, when (time.monotonic()), what, and the gRPC code."""

    kind: str
    at: float
    error: str
    grpc_code: str = ""


class Load:
    """Clients of each kind (name -> how many) sending through ``http_url`` / ``grpc_url``."""

    def __init__(self, http_url: str, grpc_url: str, slow: bool) -> None:
        self.http_host, port = http_url.rsplit(":", 1)
        self.http_port = int(port)
        self.grpc_url = grpc_url
        self.kinds = {"http add_sub": 2, "grpc add_sub": 1}
        if slow:  # requests long enough to be in flight when a replica gets SIGTERM
            self.kinds.update({"http slow": 1, "grpc slow": 1})
        self.ok: Counter[str] = Counter()
        self.failures: list[Failure] = []
        #: requests sent again after nginx closed a kept-alive connection without answering
        self.resent = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()

    # -- control, from the test's thread ----------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=uvloop.run, args=(self._run(),), daemon=True)
        self._thread.start()
        self._started.wait(10)

    def stop(self, timeout: float = 60.0) -> None:
        """Let every client finish the request it is waiting for, then end the thread."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_for(self, answers: int, deadline: float = 30.0) -> None:
        """Block until ``answers`` more requests have succeeded."""
        target = sum(self.ok.values()) + answers
        end = time.monotonic() + deadline
        while sum(self.ok.values()) < target:
            if time.monotonic() > end:
                raise TimeoutError(f"load stalled: {dict(self.ok)}, failures {self.failures[:5]}")
            time.sleep(0.02)

    # -- the clients, on the load thread ----------------------------------------------------
    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        channel, infer = grpc_infer(self.grpc_url)
        host = f"{self.http_host}:{self.http_port}"
        add_sub = ("add_sub", ADD_SUB_INPUTS, ADD_SUB_OUTPUTS)
        slow = ("slow", SLOW_INPUTS, {"OUTPUT0": SLOW_INPUTS["INPUT0"]})
        clients = []
        for kind, count in self.kinds.items():
            protocol, model = kind.split()
            name, inputs, expected = add_sub if model == "add_sub" else slow
            for _ in range(count):
                if protocol == "http":
                    encode = http_binary_request if model == "add_sub" else http_json_request
                    request = encode(host, name, inputs, list(expected))
                    clients.append(self._http_client(kind, request, expected))
                else:
                    message = grpc_request(name, inputs, list(expected))
                    clients.append(self._grpc_client(kind, infer, message, expected))
        self._started.set()
        try:
            await asyncio.gather(*clients)
        finally:
            await channel.close()

    async def _http_client(
        self, kind: str, request: bytes, expected: dict[str, np.ndarray]
    ) -> None:
        assert self._stop is not None
        connection: HttpConnection | None = None
        answered = 0  # answers on the current connection
        while not self._stop.is_set():
            try:
                if connection is None:
                    connection = await HttpConnection.open(self.http_host, self.http_port)
                    answered = 0
                head, body = await connection.send(request)
                check_outputs(decode_http_response(head, body), expected, kind)
                self.ok[kind] += 1
                answered += 1
                # nginx ends a client connection after `keepalive_requests` answers, saying
                # so in the last one; a client must not send on that connection again.
                if header_value(head, b"connection") == b"close":
                    connection.close()
                    connection = None
            except ConnectionError as error:
                # A kept-alive connection that nginx closed without answering (an old worker
                # leaving after a reload does that): the request reached no replica, and an
                # HTTP client sends it again on a new connection. Once: a new connection that
                # fails is a failure.
                if answered:
                    self.resent += 1
                else:
                    self.failures.append(Failure(kind, time.monotonic(), repr(error)))
                connection = None
            except (BadResponse, OSError) as error:
                self.failures.append(Failure(kind, time.monotonic(), repr(error)))
                if connection is not None:
                    connection.close()
                connection = None
        if connection is not None:
            connection.close()

    async def _grpc_client(
        self,
        kind: str,
        infer: Callable[..., Awaitable[bytes]],
        message: bytes,
        expected: dict[str, np.ndarray],
    ) -> None:
        assert self._stop is not None
        while not self._stop.is_set():
            try:
                answer = await infer(message, timeout=60)
                check_outputs(decode_grpc_response(answer), expected, kind)
                self.ok[kind] += 1
            except BadResponse as error:
                self.failures.append(Failure(kind, time.monotonic(), repr(error)))
            except grpc.aio.AioRpcError as error:
                detail = f"{error.code().name}: {error.details()}"
                self.failures.append(Failure(kind, time.monotonic(), detail, error.code().name))
