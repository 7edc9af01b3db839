"""Every byte a request makes the server hold is charged to ``--max-buffered-bytes`` until
the request ends (issue 30): bodies queued for a busy model, what decoding a body allocates
(a BYTES bomb: millions of empty elements), and JSON bodies above their own cap
(``--max-json-request-bytes``). Each is refused before it is allocated, with a message naming
the limit, on the built-in servers and, where the twin can hold it, on uvicorn.

A real ``inferplex serve`` process per twin with small limits: a Python model ("gate") that
holds its requests while a file exists keeps bodies queued; identity_bytes takes the bombs.
Loopback only; every wait is bounded.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests

from examples.modelgen import identity
from inferplex.protocol.v2 import generated as pb
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.conftest import TWINS

MiB = 1 << 20
#: the server-wide budget, and each queued request's body
BUDGET = 12 * MiB
BODY = 5 * MiB
#: the JSON cap
MAX_JSON = MiB
#: how long the gate holds a request at most (the test opens it well before)
HOLD_S = 30

GATE_CONFIG = """
name: "gate"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

#: answers the first value of its input, once the gate file is gone (HOLD_S at most)
GATE = """
import time
from pathlib import Path
import numpy as np
from inferplex.handler import triton as pb_utils

GATE = Path(__GATE__)

class TritonPythonModel:
    def execute(self, requests):
        deadline = time.monotonic() + __HOLD__
        while GATE.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", x[:1].astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


@pytest.fixture(scope="module", params=list(TWINS))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, Path, str]]:
    """A server with the gate and identity_bytes, small limits; the gate file; the twin."""
    root = tmp_path_factory.mktemp(f"memory-{request.param}")
    repository = root / "models"
    gate = root / "gate"
    folder = repository / "gate" / "1"
    folder.mkdir(parents=True)
    code = GATE.replace("__GATE__", repr(str(gate))).replace("__HOLD__", str(HOLD_S))
    (folder / "model.py").write_text(code)
    (repository / "gate" / "config.pbtxt").write_text(GATE_CONFIG)
    identity(repository, "BYTES")
    settings = {f"INFERPLEX_{key.upper()}": value for key, value in TWINS[request.param].items()}
    env = {
        "INFERPLEX_MAX_BUFFERED_BYTES": str(BUDGET),
        "INFERPLEX_MAX_REQUEST_BYTES": str(8 * MiB),
        "INFERPLEX_MAX_GRPC_MESSAGE_BYTES": str(8 * MiB),
        "INFERPLEX_MAX_JSON_REQUEST_BYTES": str(MAX_JSON),
        **settings,
    }
    running = start_server(repository, root / "server.log", env=env)
    yield running, gate, request.param
    assert running.stop() == 0, running.log()


def _binary(model: str, array: np.ndarray, datatype: str, data: bytes) -> tuple[bytes, dict]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": datatype,
                    "shape": list(array.shape),
                    "parameters": {"binary_data_size": len(data)},
                }
            ]
        }
    ).encode()
    headers = {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }
    return header + data, headers


def _post_fp32(running: RunningServer, values: int) -> requests.Response:
    array = np.ones(values, dtype=np.float32)
    body, headers = _binary("gate", array, "FP32", array.tobytes())
    return requests.post(
        f"http://{running.http_url}/v2/models/gate/infer",
        data=body,
        headers=headers,
        timeout=HOLD_S,
    )


def _buffered(running: RunningServer) -> float:
    text = requests.get(f"http://{running.metrics_url}/metrics", timeout=5).text
    found = re.search(r"^inferplex_http_buffered_bytes (\S+)$", text, re.M)
    assert found is not None, text
    return float(found.group(1))


def _wait_buffered(running: RunningServer, at_least: float) -> float:
    deadline = time.monotonic() + 10
    held = _buffered(running)
    while held < at_least and time.monotonic() < deadline:
        time.sleep(0.05)
        held = _buffered(running)
    return held


def test_bodies_queued_for_a_busy_model_stay_charged(
    served: tuple[RunningServer, Path, str],
) -> None:
    running, gate, _ = served
    values = BODY // 4
    assert _post_fp32(running, values).status_code == 200  # warm: the model is up
    gate.touch()
    answers: list[requests.Response] = []
    held = [threading.Thread(target=lambda: answers.append(_post_fp32(running, values)))]
    try:
        held[0].start()  # runs in the model, held by the gate
        assert _wait_buffered(running, BODY) >= BODY
        held.append(threading.Thread(target=lambda: answers.append(_post_fp32(running, values))))
        held[1].start()  # queued behind it
        assert _wait_buffered(running, 2 * BODY) >= 2 * BODY
        # a third would take the server past its budget while the two are held: refused
        refused = _post_fp32(running, values)
        assert refused.status_code == 503, refused.text
        assert "INFERPLEX_MAX_BUFFERED_BYTES" in refused.text
    finally:
        gate.unlink(missing_ok=True)
        for thread in held:
            thread.join(HOLD_S)
    assert [answer.status_code for answer in answers] == [200, 200]
    deadline = time.monotonic() + 5
    while _buffered(running) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _buffered(running) == 0  # every byte given back


def test_grpc_messages_queued_for_a_busy_model_stay_charged(
    served: tuple[RunningServer, Path, str],
) -> None:
    running, gate, twin = served
    if twin != "builtin":
        pytest.skip("grpc.aio's messages are buffered inside grpc-core (docs/security.md)")
    channel = grpc.insecure_channel(running.grpc_url)
    infer = _model_infer(channel)
    # the first message of its layout: protobuf's copy and the raw entry's are charged too,
    # three times its size in all, held while the model holds the call
    size = 7 * MiB // 2
    message = pb.ModelInferRequest(model_name="gate")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=[size // 4])
    message.raw_input_contents.append(np.ones(size // 4, dtype=np.float32).tobytes())
    gate.touch()
    calls = []
    try:
        calls.append(infer.future(message, timeout=HOLD_S))
        assert _wait_buffered(running, 3 * size) >= 3 * size
        # the same layout again (viewed in place: its body alone): past the budget now
        with pytest.raises(grpc.RpcError) as refused:
            infer(message, timeout=5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "INFERPLEX_MAX_BUFFERED_BYTES" in (refused.value.details() or "")
    finally:
        gate.unlink(missing_ok=True)
    for call in calls:
        call.result(timeout=HOLD_S)
    deadline = time.monotonic() + 5
    while _buffered(running) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _buffered(running) == 0
    channel.close()


def _bomb(count: int) -> tuple[np.ndarray, bytes]:
    """``count`` empty BYTES elements: 4 bytes each on the wire, an object each decoded."""
    return np.empty((1, count), dtype=np.object_), b"\x00\x00\x00\x00" * count


def test_a_bytes_bomb_is_refused_before_it_is_decoded(
    served: tuple[RunningServer, Path, str],
) -> None:
    running, _, _ = served
    # 1.5 M elements: 6 MiB on the wire, about 100 MiB once decoded: above the whole budget
    array, data = _bomb(3 * MiB // 2)
    body, headers = _binary("identity_bytes", array, "BYTES", data)
    answer = requests.post(
        f"http://{running.http_url}/v2/models/identity_bytes/infer",
        data=body,
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 413, answer.text
    assert "BYTES elements" in answer.text
    assert "INFERPLEX_MAX_BUFFERED_BYTES" in answer.text
    # a few elements still go through
    small, data = _bomb(3)
    body, headers = _binary("identity_bytes", small, "BYTES", data)
    url = f"http://{running.http_url}/v2/models/identity_bytes/infer"
    assert requests.post(url, data=body, headers=headers, timeout=30).status_code == 200


def test_a_grpc_bytes_bomb_is_refused_before_it_is_decoded(
    served: tuple[RunningServer, Path, str],
) -> None:
    running, _, _ = served
    channel = grpc.insecure_channel(running.grpc_url)
    infer = _model_infer(channel)
    # 3 MiB on the wire (protobuf's copies of it fit the budget), 48 MiB as objects
    count = 3 * MiB // 4
    message = pb.ModelInferRequest(model_name="identity_bytes")
    message.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, count])
    message.raw_input_contents.append(b"\x00\x00\x00\x00" * count)
    with pytest.raises(grpc.RpcError) as refused:
        infer(message, timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "BYTES elements" in (refused.value.details() or "")
    assert "INFERPLEX_MAX_BUFFERED_BYTES" in (refused.value.details() or "")
    # as typed contents: 2 bytes per element on the wire, 16 in protobuf's arena once parsed,
    # so refused before protobuf parses it
    message = pb.ModelInferRequest(model_name="identity_bytes")
    tensor = message.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, count])
    tensor.contents.bytes_contents.extend([b""] * count)
    with pytest.raises(grpc.RpcError) as refused:
        infer(message, timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the request message" in (refused.value.details() or "")
    assert "INFERPLEX_MAX_BUFFERED_BYTES" in (refused.value.details() or "")
    channel.close()


def test_a_json_body_above_its_cap_is_refused_naming_it(
    served: tuple[RunningServer, Path, str],
) -> None:
    running, _, _ = served
    values = [0.5] * (MAX_JSON // 4)
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(values)], "data": values}]}
    ).encode()
    assert len(body) > MAX_JSON
    url = f"http://{running.http_url}/v2/models/gate/infer"
    answer = requests.post(url, data=body, timeout=30)
    assert answer.status_code == 413, answer.text
    assert "INFERPLEX_MAX_JSON_REQUEST_BYTES" in answer.text
    assert "binary" in answer.text
    # sent in pieces (no Content-Length): counted once whole
    answer = requests.post(url, data=iter([body[:MiB], body[MiB:]]), timeout=30)
    assert answer.status_code == 413, answer.text
    assert "INFERPLEX_MAX_JSON_REQUEST_BYTES" in answer.text


def _model_infer(channel: grpc.Channel) -> Any:
    """ModelInfer as a bare grpc call on ``channel``: messages as built, no client checks."""
    return channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
