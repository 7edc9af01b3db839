"""Telling a running handler that requests of its batch lost their callers: the cancel board
in shared memory, the hand-over between the event loop and the instance's thread, what
handlers of both styles read, and a real worker process that sees it while it runs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from inferplex.backends.base import BatchRequest, Cancellation, InstanceSpec
from inferplex.backends.python import PythonBackend
from inferplex.backends.python.styles import make_runner
from inferplex.backends.worker.cancel import CancelBoard
from inferplex.config.model_config import ModelConfig
from inferplex.handler import BaseHandler
from inferplex.handler import triton as pb_utils
from tests.unit.backends.python.test_runner import context, infos

TIMEOUT = 30.0


@pytest.fixture
def boards() -> Iterator[tuple[CancelBoard, CancelBoard]]:
    """The server's board and the worker's view of it (another mapping of the same file)."""
    server = CancelBoard.create(4)
    worker = CancelBoard(os.dup(server.fd))
    yield server, worker
    server.close()
    worker.close()


def test_a_notice_marks_its_request_of_its_batch_only(
    boards: tuple[CancelBoard, CancelBoard],
) -> None:
    server, worker = boards
    assert worker.slots == 4
    assert not any(worker.cancelled(1, i) for i in range(4))
    server.cancel(1, [2])
    assert [worker.cancelled(1, i) for i in range(4)] == [False, False, True, False]
    # a late notice for batch 1 does not mark batch 2's request 2, and cells are never cleared
    assert not worker.cancelled(2, 2)
    server.cancel(2, [0, 7, -1])  # past the board: ignored
    assert worker.checker(2)(0) and not worker.checker(2)(2) and not worker.cancelled(2, 7)


def test_cancellations_reach_the_forwarder_whichever_comes_first() -> None:
    forwarded: list[int] = []

    def forward(indexes: Iterable[int]) -> None:
        forwarded.extend(indexes)

    early = Cancellation()
    early.cancel([1])  # before the instance's thread started the batch
    early.forward_to(forward)
    assert forwarded == [1]
    early.cancel([1, 3])  # each index is forwarded once
    assert forwarded == [1, 3]
    assert early.indexes == {1, 3}


def test_a_triton_request_reads_its_own_flag() -> None:
    seen: list[list[bool]] = []

    class Model:
        def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[object]:
            seen.append([r.is_cancelled() for r in requests])
            x = pb_utils.get_input_tensor_by_name(requests[0], "INPUT0")
            assert x is not None
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x.as_numpy())])] * 3

    runner = make_runner(Model(), context())
    batch = {"INPUT0": np.zeros((3, 4), np.float32)}
    requests = infos(("a", {}, 1), ("b", {}, 1), ("c", {}, 1))
    runner.run_requests(batch, ["OUTPUT0"], requests, lambda index: index == 1)
    runner.run_requests(batch, ["OUTPUT0"], requests)  # nothing can cancel it
    assert seen == [[False, True, False], [False, False, False]]
    assert not pb_utils.InferenceRequest("other").is_cancelled()  # a request for BLS


def test_a_torchserve_handler_reads_rows_and_the_whole_batch() -> None:
    seen: list[tuple[list[bool], bool]] = []

    class Handler(BaseHandler):
        def inference(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            context = self._context()
            rows = len(data["INPUT0"])
            seen.append(([context.is_cancelled(i) for i in range(rows)], context.is_cancelled()))
            return {"OUTPUT0": data["INPUT0"]}

    runner = make_runner(Handler(), context())
    batch = {"INPUT0": np.zeros((3, 4), np.float32)}
    requests = infos(("a", {}, 2), ("b", {}, 1))  # rows 0-1 are a's, row 2 is b's
    runner.run_requests(batch, ["OUTPUT0"], requests, lambda index: index == 0)
    runner.run_requests(batch, ["OUTPUT0"], requests, lambda index: True)
    runner.run_requests(batch, ["OUTPUT0"], requests)
    assert seen == [
        ([True, True, False], False),
        ([True, True, True], True),
        ([False, False, False], False),
    ]


#: the batch waits until its first request is cancelled (or 20 s pass), after writing the file
#: the first request's parameter "started" names; each request's output is 10 if it was
#: cancelled when the batch started, plus 1 if it was at the end
WAITER = """
import json, time
from pathlib import Path
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        at_start = [r.is_cancelled() for r in requests]
        Path(json.loads(requests[0].parameters())["started"]).touch()
        deadline = time.monotonic() + 20
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.005)
        answers = []
        for request, early in zip(requests, at_start):
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            flag = 10.0 * early + request.is_cancelled()
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 0 + flag)]))
        return answers
"""


@pytest.fixture(scope="module")
def waiter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PythonBackend]:
    path = tmp_path_factory.mktemp("repo") / "py" / "1" / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text(WAITER)
    config = ModelConfig.model_validate(
        {
            "name": "py",
            "backend": "python",
            "max_batch_size": 4,
            "input": [{"name": "INPUT0", "data_type": "FP32", "dims": [1]}],
            "output": [{"name": "OUTPUT0", "data_type": "FP32", "dims": [1]}],
        }
    )
    backend = PythonBackend(path, config, InstanceSpec())
    yield backend
    backend.close()


def run_batch(backend: PythonBackend, cancellation: Cancellation, started: Path) -> list[float]:
    """A batch of two requests; what the handler saw of each."""
    requests = [BatchRequest("a", {"started": str(started)}, 1), BatchRequest("b", {}, 1)]
    inputs = {"INPUT0": np.zeros((2, 1), np.float32)}
    answers = backend.execute_requests(inputs, ["OUTPUT0"], requests, cancellation)
    return [float(a["OUTPUT0"][0, 0]) for a in answers if isinstance(a, dict)]


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_running_handler_sees_its_request_cancelled(
    waiter: PythonBackend, tmp_path: Path
) -> None:
    cancellation = Cancellation()
    started = tmp_path / "started"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_batch, waiter, cancellation, started)
        wait_for(started)
        assert not running.done()
        cancellation.cancel([0])  # what the event loop does when a caller goes away
        # the first request is seen cancelled (the handler stops waiting: long before its
        # own 20 s), the other request of the batch is not
        assert running.result(TIMEOUT) == [1.0, 0.0]


def test_a_notice_before_the_batch_starts_is_not_lost_nor_kept(
    waiter: PythonBackend, tmp_path: Path
) -> None:
    early = Cancellation()
    early.cancel([0])
    assert run_batch(waiter, early, tmp_path / "first") == [11.0, 0.0]
    # the next batch (numbered anew) starts with nothing cancelled, though its cells still
    # hold the earlier batch's number
    later = Cancellation()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(run_batch, waiter, later, tmp_path / "second")
        wait_for(tmp_path / "second")
        later.cancel([0])
        assert running.result(TIMEOUT) == [1.0, 0.0]
