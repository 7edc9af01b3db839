"""BLS calls of decoupled models (Triton's ``exec(decoupled=True)`` / ``async_exec(decoupled=
True)``), served by a real ``inferplex serve`` process: python_backend's ``bls_decoupled``
example (its sync and async models calling the decoupled ``square_int32``, and its clients'
checks), the responses' values and order, errors sent in the stream, a call that cannot
start, an ordinary model called with ``decoupled=True``, the called stream stopped when the
caller stops reading, cancels, or loses its own client, and a slow caller holding the called
model back.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

TIMEOUT = 20.0

#: python_backend's examples/decoupled square model, in its spirit: IN = n, n responses each
#: with OUT = n, sent from a thread the model starts, then the final flag alone
SQUARE = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, int(n[0])), daemon=True).start()
        return None

    def respond(self, sender, n):
        for _ in range(n):
            out = pb_utils.Tensor("OUT", np.array([n], np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

#: IN = n: responses OUT = 0 .. n-1 in order; IN = -1: 0, an error, 2, then the final flag
COUNT = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n if n >= 0 else 3):
                if n < 0 and i == 1:
                    code = pb_utils.TritonError.INVALID_ARG
                    error = pb_utils.TritonError("response 1 failed", code)
                    sender.send(pb_utils.InferenceResponse(error=error))
                    continue
                out = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: IN = n: a response every 10 ms up to n (60 s at most), stopping when its request is
#: cancelled; leaves MARKS/<n>.cancelled or MARKS/<n>.finished
SLOW = """
import time
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils

MARKS = Path(__MARKS__)

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            deadline = time.monotonic() + 60
            seen = "finished"
            for i in range(n):
                if request.is_cancelled():
                    seen = "cancelled"
                    break
                if time.monotonic() > deadline:
                    break
                out = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
                time.sleep(0.01)
            (MARKS / f"{n}.{seen}").touch()
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: IN = n: n responses as fast as they are taken, writing how many it sent to
#: MARKS/<n>.progress after each
FAST = """
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils

MARKS = Path(__MARKS__)

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(n):
                if request.is_cancelled():
                    break
                out = pb_utils.Tensor("OUT", np.array([i], np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
                (MARKS / "fast.tmp").write_text(str(i + 1))
                (MARKS / "fast.tmp").replace(MARKS / f"{n}.progress")  # whole for a reader
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: an ordinary model: OUT = 2 * IN
DOUBLE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
"""

#: bls_decoupled's sync model, in its spirit: SUM = the sum of square_int32's OUTs
BLS_SYNC = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        if len(requests) != 1:
            raise pb_utils.TritonModelException("unsupported batch size " + str(len(requests)))
        n = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        call = pb_utils.InferenceRequest(
            model_name="square_int32", inputs=[n], requested_output_names=["OUT"]
        )
        total = np.array([0])
        for response in call.exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            if len(response.output_tensors()) > 0:
                total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
"""

#: bls_decoupled's async model, in its spirit: two calls gathered, SUM = both sums
BLS_ASYNC = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        if len(requests) != 1:
            raise pb_utils.TritonModelException("unsupported batch size " + str(len(requests)))
        n = pb_utils.get_input_tensor_by_name(requests[0], "IN")
        pending = []
        for _ in range(2):
            call = pb_utils.InferenceRequest(
                model_name="square_int32", inputs=[n], requested_output_names=["OUT"]
            )
            pending.append(call.async_exec(decoupled=True))
        total = np.array([0])
        for responses in await asyncio.gather(*pending):
            for response in responses:
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                if len(response.output_tensors()) > 0:
                    total += pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SUM", total)])]
"""

#: calls MODEL with IN (decoupled=True) and describes each response in LOG, in order:
#: "v:<OUT>", "e:<code>:<message>" or "empty"
COLLECT = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            model = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0]
            n = pb_utils.get_input_tensor_by_name(request, "IN")
            call = pb_utils.InferenceRequest(
                model_name=model, inputs=[n], requested_output_names=["OUT"]
            )
            log = []
            for response in call.exec(decoupled=True):
                if response.has_error():
                    log.append(f"e:{response.error().code()}:{response.error().message()}")
                elif response.output_tensors():
                    out = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
                    log.append(f"v:{int(out[0])}")
                else:
                    log.append("empty")
            logged = pb_utils.Tensor("LOG", np.array(log, dtype=object))
            answers.append(pb_utils.InferenceResponse([logged]))
        return answers
"""

#: calls slow_int32 with IN[0] and reads its first response; IN[1] = 1: then cancel() and read
#: on (CODE: the code of the final response's error); IN[1] = 0: return at once (CODE -1).
#: IN[1] = 2: read on to the end, leaving MARKS/<n>.reading after the first response;
#: IN[1] = 3: call fast_int32 instead, wait 1 s after its first response, CODE: how many it sent
FIRST = """
import time
from pathlib import Path
import numpy as np
import triton_python_backend_utils as pb_utils

MARKS = Path(__MARKS__)

class TritonPythonModel:
    def execute(self, requests):
        n, mode = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
        call = pb_utils.InferenceRequest(
            model_name="fast_int32" if mode == 3 else "slow_int32",
            inputs=[pb_utils.Tensor("IN", np.array([n], np.int32))],
            requested_output_names=["OUT"],
        )
        responses = call.exec(decoupled=True)
        first = next(responses)
        code = -1
        if mode == 1:
            responses.cancel()
            rest = list(responses)
            code = rest[-1].error().code() if rest[-1].has_error() else -2
        elif mode == 2:
            (MARKS / f"{n}.reading").touch()
            for _ in responses:
                pass
        elif mode == 3:
            time.sleep(1.0)
            code = int((MARKS / f"{n}.progress").read_text())
        out = pb_utils.get_output_tensor_by_name(first, "OUT").as_numpy()
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("OUT", out), pb_utils.Tensor("CODE", np.array([code], np.int32)),
        ])]
"""

DECOUPLED = "model_transaction_policy { decoupled: true }"


def config(ins: str, outs: str, extra: str = "") -> str:
    return f'backend: "python"\nmax_batch_size: 0\ninput [ {ins} ]\noutput [ {outs} ]\n{extra}\n'


def tensor(name: str, kind: str, dims: str) -> str:
    return f'{{ name: "{name}" data_type: TYPE_{kind} dims: [ {dims} ] }}'


IN1, OUT1 = tensor("IN", "INT32", "1"), tensor("OUT", "INT32", "1")
SUM = tensor("SUM", "INT32", "1")
MODELS = {
    "square_int32": (SQUARE, config(IN1, OUT1, DECOUPLED)),
    "count_int32": (COUNT, config(IN1, OUT1, DECOUPLED)),
    "slow_int32": (SLOW, config(IN1, OUT1, DECOUPLED + "\ninstance_group [{ count: 2 }]")),
    "fast_int32": (FAST, config(IN1, OUT1, DECOUPLED)),
    "double_int32": (DOUBLE, config(IN1, OUT1)),
    "bls_decoupled_sync": (BLS_SYNC, config(IN1, SUM)),
    "bls_decoupled_async": (BLS_ASYNC, config(IN1, SUM)),
    "bls_collect": (
        COLLECT,
        config(f"{tensor('MODEL', 'STRING', '1')}, {IN1}", tensor("LOG", "STRING", "-1")),
    ),
    "bls_first": (
        FIRST,
        config(tensor("IN", "INT32", "2"), f"{OUT1}, {tensor('CODE', 'INT32', '1')}"),
    ),
}


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, marks: Path) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("bls_decoupled_repo")
    for name, (code, text) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(code.replace("__MARKS__", repr(str(marks))))
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\n{text}')
    running = start_server(repo, tmp_path_factory.mktemp("bls_decoupled_log") / "server.log")
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def call_sum(server: RunningServer, model: str, value: int) -> np.ndarray:
    """What bls_decoupled's clients do: infer over HTTP with a request id, SUM asked for."""
    with httpclient.InferenceServerClient(server.http_url) as client:
        data = np.array([value], dtype=np.int32)
        inputs = [httpclient.InferInput("IN", data.shape, np_to_triton_dtype(data.dtype))]
        inputs[0].set_data_from_numpy(data)
        outputs = [httpclient.InferRequestedOutput("SUM")]
        response = client.infer(model, inputs, request_id=str(1), outputs=outputs)
        result: np.ndarray = response.as_numpy("SUM")
        return result


@pytest.mark.parametrize(
    ("model", "times"), [("bls_decoupled_sync", 1), ("bls_decoupled_async", 2)]
)
def test_the_bls_decoupled_examples(server: RunningServer, model: str, times: int) -> None:
    for value in [4, 2, 0, 1]:  # the clients' values and check
        data = np.array([value], dtype=np.int32)
        assert np.allclose(times * data * data, call_sum(server, model, value)), value


def collect(server: RunningServer, model: str, value: int) -> list[str]:
    body = {
        "inputs": [
            {"name": "MODEL", "datatype": "BYTES", "shape": [1], "data": [model]},
            {"name": "IN", "datatype": "INT32", "shape": [1], "data": [value]},
        ]
    }
    url = f"http://{server.http_url}/v2/models/bls_collect/infer"
    answer = requests.post(url, json=body, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    log: list[str] = answer.json()["outputs"][0]["data"]
    return log


def test_responses_come_in_order_and_end_with_the_empty_final(server: RunningServer) -> None:
    assert collect(server, "count_int32", 4) == ["v:0", "v:1", "v:2", "v:3", "empty"]
    assert collect(server, "count_int32", 0) == ["empty"]  # only the final flag
    assert collect(server, "square_int32", 3) == ["v:3", "v:3", "v:3", "empty"]


def test_an_error_response_comes_in_its_place(server: RunningServer) -> None:
    # INVALID_ARG is 3: the error keeps its code, and the stream goes on after it
    log = collect(server, "count_int32", -1)
    assert [entry[:4] for entry in log] == ["v:0", "e:3:", "v:2", "empt"]
    assert log[1].endswith("response 1 failed")


def test_a_call_that_cannot_start_is_one_error_response(server: RunningServer) -> None:
    (only,) = collect(server, "no_such_model", 1)
    assert only.startswith("e:2:") and "no_such_model" in only  # NOT_FOUND


def test_an_ordinary_model_called_decoupled_answers_once(server: RunningServer) -> None:
    # one response, final itself: no empty final after it (Triton's is_last_response)
    assert collect(server, "double_int32", 21) == ["v:42"]


def cancelled_count(server: RunningServer, model: str) -> float:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=TIMEOUT).text
    pattern = rf'inferplex_inference_request_cancelled\{{model="{model}",version="1"\}} (\S+)'
    match = re.search(pattern, text)
    return float(match.group(1)) if match else 0.0


def wait_for(path: Path, server: RunningServer) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        found = sorted(p.name for p in path.parent.glob(path.name.split(".")[0] + ".*"))
        assert time.monotonic() < deadline, f"no {path.name} after {TIMEOUT} s (found {found})"
        assert server.process.poll() is None, server.log()
        time.sleep(0.01)


def first(server: RunningServer, n: int, mode: int) -> dict[str, list[int]]:
    body = {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [2], "data": [n, mode]}]}
    url = f"http://{server.http_url}/v2/models/bls_first/infer"
    answer = requests.post(url, json=body, timeout=TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {o["name"]: o["data"] for o in answer.json()["outputs"]}


@pytest.mark.parametrize("mode", [0, 1], ids=["stops-reading", "cancel"])
def test_a_caller_that_stops_reading_stops_the_called_stream(
    server: RunningServer, marks: Path, mode: int
) -> None:
    n = 5000 + mode  # 50 s of responses if nothing stops it
    before = cancelled_count(server, "slow_int32")
    outputs = first(server, n, mode)
    assert outputs["OUT"] == [0]
    # cancel(): the final response read after it is Triton's CANCELLED error (7)
    assert outputs["CODE"] == ([7] if mode == 1 else [-1])
    wait_for(marks / f"{n}.cancelled", server)  # the called model saw is_cancelled()
    assert not (marks / f"{n}.finished").exists()
    assert cancelled_count(server, "slow_int32") == before + 1


def test_a_caller_whose_client_goes_away_stops_the_called_stream(
    server: RunningServer, marks: Path
) -> None:
    n = 5002
    body = json.dumps(
        {"inputs": [{"name": "IN", "datatype": "INT32", "shape": [2], "data": [n, 2]}]}
    ).encode()
    head = (
        f"POST /v2/models/bls_first/infer HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((HOST, server.http_port)) as client:
        client.sendall(head.encode() + body)
        wait_for(marks / f"{n}.reading", server)  # the caller reads the called stream
    # the caller's connection is closed: the call it reads is stopped too
    wait_for(marks / f"{n}.cancelled", server)
    assert not (marks / f"{n}.finished").exists()
    assert "Traceback" not in server.log()


def test_a_slow_caller_holds_the_called_model_back(server: RunningServer) -> None:
    n = 20000  # unbounded, hundreds go out in the second the caller sleeps (471 on a busy box)
    outputs = first(server, n, 3)
    assert outputs["OUT"] == [0]
    # held at the server's bound (--stream-queue-responses, 16): the channel's 16, the 16
    # the look-ahead took, the one read, and one being sent
    assert 1 <= outputs["CODE"][0] <= 2 * 16 + 2, outputs
