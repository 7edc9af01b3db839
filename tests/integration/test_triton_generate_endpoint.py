"""The behaviours Triton's own generate endpoint test (qa/L0_http) checks, as inferplex's
tests against the built-in server: one answer on /generate and events on /generate_stream,
events leaving as the model sends them, request ids and parameters, missing, wrong-kind and
repeated inputs, bodies that are no JSON object, a model that sends no or two responses, a
failure before and after the first event, a client that goes away, how values fill the
declared dims, and the JSON size limit in Triton's words.

``mock_llm`` is written from what Triton's test expects of its model (Triton's is not
copied): PROMPT (one string) comes back as TEXT; with STREAM true it is sent REPETITION
times (a parameter, 1 by default), DELAY seconds apart, stopping when the request is
cancelled, then the final flag alone, or with FAIL_LAST an error "An Error Occurred" as the
final response; with STREAM false, one response; OUTPUT_0_DIM makes TEXT empty. Its one
instance answers one request at a time, which the cancellation test relies on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any

import pytest
import requests

from inferplex_tools.benchtool.launch import RunningServer, start_server

MOCK_LLM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "input_ids" data_type: TYPE_INT32 dims: [ 1, -1 ] optional: true }
]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
instance_group [ { count: 1 kind: KIND_MODEL } ]
"""

MOCK_LLM = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            self.answer(request)
        return None

    def answer(self, request):
        asked = json.loads(request.parameters())
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
        stream = pb_utils.get_input_tensor_by_name(request, "STREAM").as_numpy()
        # an empty TEXT as numpy makes one by default (float64), as Triton's model does
        text = np.array([]) if asked.get("OUTPUT_0_DIM") else prompt
        response = pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)])
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream.reshape(-1)[0]:
            sender.send(response, flags=final)
            return
        for _ in range(asked.get("REPETITION", 1)):
            if asked.get("DELAY") is not None:
                time.sleep(asked["DELAY"])
            if sender.is_cancelled():
                break
            sender.send(response)
        last = None
        if asked.get("FAIL_LAST"):
            last = pb_utils.InferenceResponse(error=pb_utils.TritonError("An Error Occurred"))
        sender.send(last, flags=final)
"""

#: a small --max-json-request-bytes, so that the size test sends 100 KiB, not Triton's 89 MB
JSON_LIMIT = 64 * 1024

ERROR = "An Error Occurred"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("generate_models")
    version = root / "mock_llm" / "1"
    version.mkdir(parents=True)
    (root / "mock_llm" / "config.pbtxt").write_text(MOCK_LLM_CONFIG)
    (version / "model.py").write_text(MOCK_LLM)
    env = {"INFERPLEX_MAX_JSON_REQUEST_BYTES": str(JSON_LIMIT)}
    running = start_server(root, root.parent / "server.log", env=env)
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def post(
    server: RunningServer, route: str, body: dict[str, Any] | str, *, stream: bool = False
) -> requests.Response:
    """``body`` as JSON, or as the text given (for what a dict cannot hold)."""
    data = body if isinstance(body, str) else json.dumps(body)
    headers = {"Accept": "text/event-stream"} if route == "generate_stream" else {}
    return requests.post(
        f"http://{server.http_url}/v2/models/mock_llm/{route}",
        data=data,
        headers=headers,
        stream=stream,
        timeout=60,
    )


def sse_events(reply: requests.Response) -> list[dict[str, Any]]:
    """The events of a whole server-sent event stream, each checked to be one ``data:``
    line ended by a blank line (nothing else in the stream)."""
    assert reply.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    text = reply.content.decode()
    assert text.endswith("\n\n") or not text, text
    found = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: ") and "\n" not in block, block
        found.append(json.loads(block[len("data: ") :]))
    return found


def refusal(reply: requests.Response) -> str:
    """The error message of a refused request, which is always JSON whatever the route."""
    assert reply.status_code >= 400, reply.text[:300]
    assert reply.headers["Content-Type"] == "application/json"
    message: str = reply.json()["error"]
    return message


@pytest.mark.parametrize(
    "extra",
    [
        {"PROMPT": "hello world"},
        {"PROMPT": ["hello world"]},
        {"PROMPT": [["hello world"]]},
        # the optional input too: two values fill its dims [1, -1]
        {"PROMPT": "hello world", "input_ids": [100, 200]},
    ],
)
def test_generate_answers_the_prompt_as_one_object(
    server: RunningServer, extra: dict[str, Any]
) -> None:
    """One value, a list or a nested list all fill PROMPT's dims [1, 1]; TEXT's one element
    comes back as a plain value."""
    reply = post(server, "generate", {"STREAM": False, **extra})
    assert reply.status_code == 200, reply.text
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.json() == {"model_name": "mock_llm", "model_version": "1", "TEXT": "hello world"}


def test_an_output_with_no_elements_is_an_empty_list(server: RunningServer) -> None:
    body = {"PROMPT": "hello world", "STREAM": False, "OUTPUT_0_DIM": True}
    reply = post(server, "generate", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["TEXT"] == []


@pytest.mark.parametrize(("given", "echoed"), [("42", "42"), ("", None), (None, None)])
def test_the_request_id_comes_back_when_one_is_given(
    server: RunningServer, given: str | None, echoed: str | None
) -> None:
    body: dict[str, Any] = {"PROMPT": "hi", "STREAM": False}
    if given is not None:
        body["id"] = given
    answer = post(server, "generate", body).json()
    assert answer.get("id") == echoed and answer["TEXT"] == "hi"


@pytest.mark.parametrize(
    "body",
    [
        {"PROMPT": ["hello world"], "STREAM": True, "REPETITION": 3},
        # keys of the reserved "parameters" object are parameters too
        {"PROMPT": "hello world", "STREAM": True, "parameters": {"REPETITION": 3}},
    ],
)
def test_generate_stream_sends_each_response_as_an_event(
    server: RunningServer, body: dict[str, Any]
) -> None:
    reply = post(server, "generate_stream", body)
    assert reply.status_code == 200, reply.text
    assert [event["TEXT"] for event in sse_events(reply)] == ["hello world"] * 3


def test_events_leave_as_the_model_sends_them(server: RunningServer) -> None:
    """The model sleeps ``delay`` before each response: events that arrived together would
    mean the stream was held back. Only a lower bound on the gaps is asserted, a quarter of
    the delay: a busy machine may hold one event back and so shorten the gap after it."""
    delay = 0.4
    body = {"PROMPT": "x", "STREAM": True, "REPETITION": 3, "DELAY": delay}
    arrivals = []
    with post(server, "generate_stream", body, stream=True) as reply:
        for line in reply.iter_lines():
            if line.startswith(b"data: "):
                arrivals.append(time.monotonic())
    assert len(arrivals) == 3
    gaps = [later - earlier for earlier, later in pairwise(arrivals)]
    assert all(gap > delay / 4 for gap in gaps), gaps


@pytest.mark.parametrize(
    ("body", "count"),
    [({}, 0), ({"abc": 123}, 0), ({"PROMPT": "hi"}, 1), ({"STREAM": False, "other": "x"}, 1)],
)
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_missing_inputs_are_counted_against_the_range_declared(
    server: RunningServer, route: str, body: dict[str, Any], count: int
) -> None:
    """Keys that name no input are parameters, not inputs; input_ids is optional."""
    expected = f"expected number of inputs between 2 and 3 but got {count}"
    assert expected in refusal(post(server, route, body))


NON_STRING = "attempt to access JSON non-string as string"
NON_BOOLEAN = "attempt to access JSON non-boolean as boolean"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"PROMPT": 123, "STREAM": False}, NON_STRING),
        ({"PROMPT": "hi", "STREAM": "false"}, NON_BOOLEAN),
        ({"PROMPT": {"USER": "hi", "BOT": "there"}, "STREAM": True}, NON_STRING),
        # two bad values: the first in the body is the one named
        ('{"PROMPT": true, "STREAM": 123}', NON_STRING),
        ('{"STREAM": 123, "PROMPT": true}', NON_BOOLEAN),
        # two strings cannot fill dims [1, 1]
        ({"PROMPT": ["a", "b"], "STREAM": False}, "convert input 'PROMPT' to tensor"),
        # a repeated input: the first repeated in the body is the one named
        ('{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}', "input 'PROMPT' already exists"),
        ('{"PROMPT": "a", "STREAM": false, "STREAM": false}', "input 'STREAM' already exists"),
        (
            '{"PROMPT": "a", "STREAM": false, "PROMPT": "b", "STREAM": true}',
            "input 'PROMPT' already exists",
        ),
        (
            '{"PROMPT": "a", "STREAM": false, "STREAM": true, "PROMPT": "b"}',
            "input 'STREAM' already exists",
        ),
        # parameters: an object
        ({"PROMPT": "a", "STREAM": True, "parameters": 1}, "Expected JSON object for keyword"),
        # no JSON object at all
        ('{"PROMPT": "a", ', "not valid JSON"),
        ('["PROMPT", "a"]', "must be a JSON object"),
    ],
)
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_bodies_the_model_cannot_take_are_a_400_saying_why(
    server: RunningServer, route: str, body: dict[str, Any] | str, expected: str
) -> None:
    reply = post(server, route, body)
    assert reply.status_code == 400, reply.text[:300]
    assert expected in refusal(reply)


@pytest.mark.parametrize(
    "body",
    [
        {"PROMPT": "a", "STREAM": True, "parameters": {"nested": {"twice": 1}, "REPETITION": 2}},
        {"PROMPT": "a", "STREAM": True, "PARAMS": {"P0": 0, "P1": True}, "REPETITION": 2},
    ],
)
def test_parameters_may_hold_objects(server: RunningServer, body: dict[str, Any]) -> None:
    """Unlike Triton, which refuses them (docs/streaming.md): an object as a parameter's
    value, in ``parameters`` or as a key that names no input, reaches the model with the
    others."""
    reply = post(server, "generate_stream", body)
    assert reply.status_code == 200, reply.text
    assert [event["TEXT"] for event in sse_events(reply)] == ["a", "a"]


def test_json_above_the_limit_is_a_413_naming_it(server: RunningServer) -> None:
    """In one input or spread over several, what counts is the size of the whole body."""
    text = "A" * (JSON_LIMIT + 1024)
    half = len(text) // 2
    for body in (
        {"PROMPT": text, "STREAM": False},
        {"INPUT0": text[:half], "INPUT1": text[half:], "STREAM": False},
    ):
        reply = post(server, "generate", body)
        assert reply.status_code == 413
        message = refusal(reply)
        assert f"exceeds the maximum allowed input size of {JSON_LIMIT} bytes" in message


@pytest.mark.parametrize("stream", [False, True])
def test_one_response_answers_both_routes(server: RunningServer, stream: bool) -> None:
    """STREAM true: the response, then the final flag alone; false: one response with it."""
    body = {"PROMPT": "hi", "STREAM": stream}
    assert post(server, "generate", body).json()["TEXT"] == "hi"
    assert [event["TEXT"] for event in sse_events(post(server, "generate_stream", body))] == ["hi"]


@pytest.mark.parametrize("repetition", [0, 2])
def test_generate_needs_exactly_one_response(server: RunningServer, repetition: int) -> None:
    body = {"PROMPT": "hi", "STREAM": True, "REPETITION": repetition}
    streamed = post(server, "generate_stream", body)
    assert streamed.status_code == 200
    assert len(sse_events(streamed)) == repetition
    message = refusal(post(server, "generate", body))
    assert "generate expects model to produce exactly 1 response" in message


def test_a_failure_as_the_first_response_sets_the_status(server: RunningServer) -> None:
    body = {"PROMPT": "hi", "STREAM": True, "REPETITION": 0, "FAIL_LAST": True}
    reply = post(server, "generate_stream", body)
    assert reply.status_code >= 400
    assert sse_events(reply) == [{"error": ERROR}]


def test_a_failure_after_the_first_event_is_an_event(server: RunningServer) -> None:
    """The status left with the first event: the error can only follow it as an event."""
    body = {"PROMPT": "hi", "STREAM": True, "REPETITION": 1, "FAIL_LAST": True}
    reply = post(server, "generate_stream", body)
    assert reply.status_code == 200
    events = sse_events(reply)
    assert [event.get("TEXT", event.get("error")) for event in events] == ["hi", ERROR]
    assert events[1] == {"error": ERROR}


def test_a_client_that_goes_away_cancels_the_request(server: RunningServer) -> None:
    """A stream of 100 events 0.1 s apart, left after the first: the model's one instance
    is free again (the request cancelled) long before the 10 s the rest would take, and the
    server still answers."""
    body = {"PROMPT": "x", "STREAM": True, "REPETITION": 100, "DELAY": 0.1}
    with post(server, "generate_stream", body, stream=True) as reply:
        next(line for line in reply.iter_lines() if line.startswith(b"data: "))
    started = time.monotonic()
    after = post(server, "generate", {"PROMPT": "next", "STREAM": False})
    assert after.json()["TEXT"] == "next"
    assert time.monotonic() - started < 6
    live = requests.get(f"http://{server.http_url}/v2/health/live", timeout=10)
    assert live.status_code == 200


def test_many_requests_at_once_all_answer(server: RunningServer) -> None:
    """Unary and streamed requests together, each answered whole (Triton's check for races
    between the thread that sends and the one that completes)."""
    unary = {"PROMPT": "one", "STREAM": False, "param": "x"}
    streamed = {"PROMPT": "many", "STREAM": True, "REPETITION": 3, "param": "x"}

    def texts(body: dict[str, Any]) -> list[str]:
        reply = post(server, "generate_stream", body)
        assert reply.status_code == 200, reply.text
        return [event["TEXT"] for event in sse_events(reply)]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(texts, [unary, streamed] * 20))
    assert answers == [["one"], ["many"] * 3] * 20
