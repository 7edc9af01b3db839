"""Stateful models (sequence_batching) served to tritonclient over HTTP and gRPC, as Triton's
simple_sequence clients call them: control inputs fed by the server, implicit state kept per
sequence, correlation ids as uint64 and string, the errors Triton gives."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from examples.modelgen import sequences
from inferplex_tools.benchtool.launch import RunningServer, start_server

#: what Triton's simple_*_sequence_* clients send after a first value (0 or 100 or 20)
VALUES = [11, 7, 5, 3, 2, 0, 1]


@pytest.fixture(scope="module")
def sequence_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("sequences")
    sequences.simple_sequence(repo)
    sequences.accumulator(repo, "acc_direct", instances=2)
    sequences.accumulator(repo, "acc_oldest", strategy="oldest { max_candidate_sequences: 2 }")
    sequences.accumulator(repo, "acc_string", corrid="TYPE_STRING")
    sequences.accumulator(repo, "acc_idle", idle_us=100_000)
    sequences.python_sum(repo)
    sequences.python_sum(repo, "python_sum_x2", instances=2)
    sequences.seeded_sum(repo, (100.0, -1.0))
    running = start_server(repo, repo / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def _clients(server: RunningServer) -> list[Any]:
    return [
        httpclient.InferenceServerClient(server.http_url),
        grpcclient.InferenceServerClient(server.grpc_url),
    ]


def _module(client: Any) -> Any:
    return httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient


def _send(client: Any, model: str, value: float, dtype: str, **sequence: Any) -> Any:
    module = _module(client)
    data = np.full((1, 1), value, dtype=np.int32 if dtype == "INT32" else np.float32)
    tensor = module.InferInput("INPUT", list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    return client.infer(model, [tensor], **sequence)


def _sequence(client: Any, model: str, sequence_id: Any, values: list[int], dtype: str) -> list:
    return [
        _send(
            client,
            model,
            value,
            dtype,
            sequence_id=sequence_id,
            sequence_start=i == 0,
            sequence_end=i == len(values) - 1,
        )
        for i, value in enumerate(values)
    ]


@pytest.mark.parametrize("protocol", [0, 1], ids=["http", "grpc"])
def test_simple_sequence_answers_as_triton_s_client_expects(
    sequence_server: RunningServer, protocol: int
) -> None:
    client = _clients(sequence_server)[protocol]
    results = [
        _sequence(client, "simple_sequence", sid, [first, *(v * sign for v in VALUES)], "INT32")
        for sid, first, sign in ((1000, 0, 1), (1001, 100, -1), (str(uuid.uuid4()), 20, -1))
    ]
    outputs = [[int(r.as_numpy("OUTPUT")[0][0]) for r in seq] for seq in results]
    assert outputs[0] == [1, *VALUES]  # the start request gets its value plus one
    assert outputs[1] == [101, *(-v for v in VALUES)]
    assert outputs[2] == [21, *(-v for v in VALUES)]


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_implicit_state_runs_per_sequence_with_sequences_interleaved(
    sequence_server: RunningServer, model: str
) -> None:
    # more sequences than oldest's slots: two wait their turn; the largest id over HTTP
    ids = [7, 8, (1 << 64) - 1, 9]

    def one(index: int) -> list[float]:
        client = _clients(sequence_server)[index % 2]  # a client per thread, as they need
        results = _sequence(client, model, ids[index], [index + 1.0] * 5, "FP32")
        client.close()
        assert [int(r.as_numpy("CORRID_OUT")[0][0]) for r in results] == [ids[index]] * 5
        ends = [bool(r.as_numpy("END_OUT")[0][0]) for r in results]
        assert ends == [False] * 4 + [True]
        return [float(r.as_numpy("OUTPUT")[0][0]) for r in results]

    with concurrent.futures.ThreadPoolExecutor(len(ids)) as pool:
        sums = list(pool.map(one, range(len(ids))))
    assert sums == [[(i + 1.0) * k for k in range(1, 6)] for i in range(len(ids))]


def test_the_state_starts_from_its_data_file(sequence_server: RunningServer) -> None:
    client = _clients(sequence_server)[0]
    inputs = [np.array([[1.0, 2.0]], dtype=np.float32)] * 3
    outputs = []
    for i, data in enumerate(inputs):
        tensor = httpclient.InferInput("INPUT", [1, 2], "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(
            "seeded_sum", [tensor], sequence_id=77, sequence_start=i == 0, sequence_end=i == 2
        )
        outputs.append(result.as_numpy("OUTPUT").tolist())
    assert outputs == [[[101.0, 1.0]], [[102.0, 3.0]], [[103.0, 5.0]]]


def test_a_string_correlation_id_reaches_the_model(sequence_server: RunningServer) -> None:
    client = _clients(sequence_server)[1]
    results = _sequence(client, "acc_string", "session-a", [2.0, 3.0], "FP32")
    assert [r.as_numpy("CORRID_OUT")[0][0] for r in results] == [b"session-a"] * 2
    assert float(results[-1].as_numpy("OUTPUT")[0][0]) == 5.0


@pytest.mark.parametrize("protocol", [0, 1], ids=["http", "grpc"])
def test_sequence_errors_are_triton_s(sequence_server: RunningServer, protocol: int) -> None:
    client = _clients(sequence_server)[protocol]
    with pytest.raises(InferenceServerException, match="non-zero or non-empty correlation ID"):
        _send(client, "acc_direct", 1.0, "FP32")
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        _send(client, "acc_direct", 1.0, "FP32", sequence_id=4242)
    # a sequence that ended needs a new start; the model and other sequences are unaffected
    _sequence(client, "acc_direct", 4243, [1.0, 1.0], "FP32")
    with pytest.raises(InferenceServerException, match="START flag"):
        _send(client, "acc_direct", 1.0, "FP32", sequence_id=4243)
    (again,) = _sequence(client, "acc_direct", 4243, [4.0], "FP32")
    assert again.as_numpy("OUTPUT").tolist() == [[4.0]]
    # a string id for a numeric CORRID input is the client's error (was a 500)
    with pytest.raises(InferenceServerException, match="must be an unsigned integer") as refused:
        _send(client, "acc_direct", 1.0, "FP32", sequence_id="abc", sequence_start=True)
    assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    client.close()


def test_a_sequence_idle_past_its_limit_is_ended(sequence_server: RunningServer) -> None:
    client = _clients(sequence_server)[1]
    _send(client, "acc_idle", 1.0, "FP32", sequence_id=5, sequence_start=True)
    time.sleep(1.0)  # ten times its idle limit (0.1 s): any request now would restart the clock
    with pytest.raises(InferenceServerException, match="START flag"):
        _send(client, "acc_idle", 1.0, "FP32", sequence_id=5)


def test_the_served_config_keeps_sequence_batching(sequence_server: RunningServer) -> None:
    config = _clients(sequence_server)[0].get_model_config("simple_sequence")
    controls = config["sequence_batching"]["control_input"]
    assert [c["name"] for c in controls] == ["START", "READY"]
    assert [i["name"] for i in config["input"]] == ["INPUT"]  # controls are the server's


def test_a_batch_of_rows_in_one_sequence_request_is_refused(
    sequence_server: RunningServer,
) -> None:
    client = _clients(sequence_server)[0]
    data = np.ones((2, 1), np.float32)
    tensor = httpclient.InferInput("INPUT", [2, 1], "FP32")
    tensor.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException, match="batch-size 1"):
        client.infer("acc_direct", [tensor], sequence_id=77, sequence_start=True)


def test_sequences_over_a_grpc_stream(sequence_server: RunningServer) -> None:
    """As Triton's simple_grpc_sequence_stream_infer_client: two sequences interleaved on one
    stream, each request flagged, the answers in the order sent per sequence."""
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    values = [0, *VALUES]
    for i, value in enumerate(values):
        for sequence_id, sign in ((2000, 1), (2001, -1)):
            data = np.full((1, 1), value * sign, np.int32)
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(data)
            client.async_stream_infer(
                "simple_sequence",
                [tensor],
                request_id=f"{sequence_id}-{i}",
                sequence_id=sequence_id,
                sequence_start=i == 0,
                sequence_end=i == len(values) - 1,
            )
    results = [answers.get(timeout=30) for _ in range(2 * len(values))]
    client.stop_stream()
    client.close()
    by_id = {r.get_response().id: int(r.as_numpy("OUTPUT")[0][0]) for r in results}
    assert [by_id[f"2000-{i}"] for i in range(len(values))] == [1, *VALUES]
    assert [by_id[f"2001-{i}"] for i in range(len(values))] == [1, *(-v for v in VALUES)]


def test_statistics_count_the_sequences(sequence_server: RunningServer) -> None:
    client = _clients(sequence_server)[0]
    before = client.get_inference_statistics("acc_string")["model_stats"][0]["sequence_stats"]
    _sequence(client, "acc_string", "stats-a", [1.0, 2.0, 3.0], "FP32")
    after = client.get_inference_statistics("acc_string")["model_stats"][0]["sequence_stats"]
    assert after["started"] == before["started"] + 1
    assert after["ended"] == before["ended"] + 1
    assert after["open"] == before["open"] and after["slots"] == 8


def test_a_triton_python_model_keeps_state_by_correlation_id(
    sequence_server: RunningServer,
) -> None:
    client = _clients(sequence_server)[1]
    first = _sequence(client, "python_sum", 31, [1, 2, 3], "INT32")
    second = _sequence(client, "python_sum", "thirty-two", [10, 20], "INT32")
    assert [int(r.as_numpy("OUTPUT")[0][0]) for r in first] == [1, 3, 6]
    assert [int(r.as_numpy("OUTPUT")[0][0]) for r in second] == [10, 30]


def test_each_sequence_keeps_to_one_instance_that_holds_its_state(
    sequence_server: RunningServer,
) -> None:
    """Four sequences open at once on a two-instance Python model that keeps each running sum
    in its instance's own memory: every request of a sequence reaches the instance of its
    start, so every sum is right, and the sequences are spread over both instances."""
    steps = [1, 2, 3, 4, 5, 6]
    opened = threading.Barrier(4)

    def run(sequence_id: int) -> list[tuple[int, int]]:
        client = grpcclient.InferenceServerClient(sequence_server.grpc_url)
        answers = []
        for i, value in enumerate(steps):
            result = _send(
                client,
                "python_sum_x2",
                value,
                "INT32",
                sequence_id=sequence_id,
                sequence_start=i == 0,
                sequence_end=i == len(steps) - 1,
            )
            answers.append(
                (int(result.as_numpy("OUTPUT")[0][0]), int(result.as_numpy("INSTANCE")[0][0]))
            )
            if i == 0:
                opened.wait(timeout=30)  # all four hold a slot before any goes on
        client.close()
        return answers

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(run, [41, 42, 43, 44]))
    for answers in runs:
        assert [total for total, _ in answers] == [1, 3, 6, 10, 15, 21]
        assert len({instance for _, instance in answers}) == 1
    assert len({answers[0][1] for answers in runs}) == 2


def test_a_sequence_model_s_instance_count_changes_only_with_a_reload(
    sequence_server: RunningServer,
) -> None:
    url = f"{sequence_server.http_url}/v2/repository/models/python_sum_x2/instances"
    answer = requests.post(f"http://{url}", json={"count": 3}, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "sequence model" in answer.json()["error"]
