"""Decoupled Python models through the engine (``InferenceEngine.stream``): Triton-style
response senders (from execute and from threads the model starts), a TorchServe-style
handler that yields, errors sent in the stream, a unary call on a decoupled model, a reader
that goes away (the model sees it) and a reader that does not read (the model is held back).
Real worker processes, real models written by the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from examples.modelgen import decoupled
from inferplex import InferenceRequest, ServerConfig, Tensor
from inferplex.core.streaming import StreamedResponse
from inferplex.engine.inference import InferenceEngine
from inferplex.errors import UnsupportedError
from inferplex.server import Server, build_engine

#: sends IN[0] responses from execute itself (COUNT = i), one of them an error when asked
#: (IN[1] = its index), then the final flag; writes how far it got to the file PROGRESS
#: names, and stops once its client went away (writing "cancelled")
COUNTER = """
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        import json
        self.progress = json.loads(args["model_config"])["parameters"]["progress"]["string_value"]

    def execute(self, requests):
        for request in requests:
            count, failing = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            for i in range(count):
                if request.is_cancelled():
                    open(self.progress, "w").write("cancelled")
                    break
                if i == failing:
                    code = pb_utils.TritonError.INVALID_ARG
                    error = pb_utils.TritonError(f"response {i} failed", code)
                    sender.send(pb_utils.InferenceResponse(error=error))
                else:
                    out = pb_utils.Tensor("COUNT", np.array([i], np.int32))
                    sender.send(pb_utils.InferenceResponse([out]))
                open(self.progress, "w").write(str(i + 1))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

COUNTER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 2 ] }} ]
output [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
parameters [ {{ key: "progress" value {{ string_value: "{progress}" }} }} ]
"""

#: not decoupled, answering through the sender (Triton allows one response, final)
SENDER_ONCE = """
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value * 2)])
            request.get_response_sender().send(
                response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
"""

SENDER_ONCE_CONFIG = """
backend: "python"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { }
"""

BOUND = 2  # --stream-queue-responses for these tests


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("decoupled")
    decoupled.repeat_int32(root)
    decoupled.square_int32(root)
    decoupled.tokens(root)
    decoupled.write_model(root, "sender_once", SENDER_ONCE, SENDER_ONCE_CONFIG)
    return root


def counter(repo: Path, name: str) -> Path:
    """A COUNTER model of its own (its own progress file)."""
    progress = repo / f"{name}.progress"
    decoupled.write_model(repo, name, COUNTER, COUNTER_CONFIG.format(progress=progress))
    return progress


@pytest.fixture
async def engine(repo: Path) -> AsyncIterator[InferenceEngine]:
    engine = build_engine(ServerConfig(model_repository=repo, stream_queue_responses=BOUND))
    await engine.start()
    yield engine
    await engine.stop()


def request(model: str, **inputs: np.ndarray) -> InferenceRequest:
    tensors = [
        Tensor(name, "INT32" if a.dtype == np.int32 else "UINT32", a.shape, a)
        for name, a in inputs.items()
    ]
    return InferenceRequest(model, tensors)


async def read_all(engine: InferenceEngine, req: InferenceRequest) -> list[StreamedResponse]:
    stream = await engine.stream(req)
    return [item async for item in stream]


async def test_repeat_sends_one_response_per_element_from_its_own_thread(
    engine: InferenceEngine,
) -> None:
    values = np.array([4, 2, 0, 1], np.int32)
    req = request(
        "repeat_int32",
        IN=values,
        DELAY=np.array([1, 2, 3, 4], np.uint32),
        WAIT=np.array([0], np.uint32),  # execute returns before the responses are sent
    )
    items = await read_all(engine, req)
    assert [item.final for item in items] == [False] * 4 + [True]
    assert items[-1].response is None and items[-1].error is None  # the final flag alone
    outs = [item.response.outputs for item in items[:-1] if item.response is not None]
    assert [o[0].data.tolist() for o in outs] == [[4], [2], [0], [1]]
    assert [o[1].data.tolist() for o in outs] == [[0], [1], [2], [3]]


async def test_concurrent_streams_each_get_their_own_responses(engine: InferenceEngine) -> None:
    counts = [4, 2, 0, 1]
    answers = await asyncio.gather(
        *(read_all(engine, request("square_int32", IN=np.array([n], np.int32))) for n in counts)
    )
    for n, items in zip(counts, answers, strict=True):
        data = [item.response.outputs[0].data.tolist() for item in items if item.response]
        assert data == [[n]] * n
        assert items[-1].final


async def test_a_handler_that_yields_streams_each_result(engine: InferenceEngine) -> None:
    text = np.array([b"one two three"], dtype=object)
    req = InferenceRequest("tokens", [Tensor("text_input", "BYTES", (1,), text)])
    items = await read_all(engine, req)
    words = [item.response.outputs[0].data.tolist() for item in items if item.response]
    assert words == [[b"one"], [b"two"], [b"three"]]
    assert items[-1].final


async def test_a_unary_call_takes_a_decoupled_models_one_response(
    engine: InferenceEngine,
) -> None:
    response = await engine.infer(request("square_int32", IN=np.array([1], np.int32)))
    assert response.outputs[0].data.tolist() == [1]
    with pytest.raises(UnsupportedError, match="sent 3 responses"):
        await engine.infer(request("square_int32", IN=np.array([3], np.int32)))


async def test_an_ordinary_model_streams_its_one_response(engine: InferenceEngine) -> None:
    """A model that is not decoupled answers through its response sender (Triton's default
    mode); over a stream it is one final response."""
    items = await read_all(engine, request("sender_once", IN=np.array([[21]], np.int32)))
    assert len(items) == 1 and items[0].final and items[0].response is not None
    assert items[0].response.outputs[0].data.tolist() == [[42]]
    response = await engine.infer(request("sender_once", IN=np.array([[5]], np.int32)))
    assert response.outputs[0].data.tolist() == [[10]]


async def test_an_error_the_model_sends_goes_in_the_stream_and_the_stream_goes_on(
    repo: Path,
) -> None:
    counter(repo, "counter_errors")
    engine = build_engine(ServerConfig(model_repository=repo))
    await engine.start()
    try:
        items = await read_all(engine, request("counter_errors", IN=np.array([4, 1], np.int32)))
    finally:
        await engine.stop()
    assert [item.error is not None for item in items] == [False, True, False, False, False]
    assert items[1].error is not None and "response 1 failed" in items[1].error.message
    assert items[1].error.code.value == "invalid_argument"
    assert [i.response.outputs[0].data.tolist() for i in items if i.response] == [[0], [2], [3]]


async def test_a_reader_that_goes_away_cancels_the_request_in_the_model(repo: Path) -> None:
    progress = counter(repo, "counter_cancel")
    engine = build_engine(ServerConfig(model_repository=repo, stream_queue_responses=BOUND))
    await engine.start()
    try:
        stream = await engine.stream(request("counter_cancel", IN=np.array([10**6, -1], np.int32)))
        first = await stream.__anext__()
        assert first.response is not None
        stream.close()
        await wait_for_text(progress, "cancelled")
    finally:
        await engine.stop()


async def test_a_reader_that_does_not_read_holds_the_model_back(repo: Path) -> None:
    """The model sends 200 responses; while the reader takes none, it gets no further than
    what the reader took at once and the stream's bound (each at most ``BOUND``)."""
    progress = counter(repo, "counter_slow")
    engine = build_engine(ServerConfig(model_repository=repo, stream_queue_responses=BOUND))
    await engine.start()
    try:
        stream = await engine.stream(request("counter_slow", IN=np.array([200, -1], np.int32)))
        await stream.__anext__()
        await wait_for_text(progress, str(BOUND))  # it sent what fits
        for _ in range(20):  # however long it is given, it gets no further
            await asyncio.sleep(0.02)
            assert int(progress.read_text() or 0) <= 2 * BOUND
        rest = [item async for item in stream]
    finally:
        await engine.stop()
    assert len([item for item in rest if item.response]) == 199
    assert progress.read_text() == "200"


async def wait_for_text(path: Path, text: str, timeout: float = 30.0) -> None:
    """Poll ``path`` until it holds at least ``text`` (a number) or exactly it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text() if path.exists() else ""
        if found == text or (found.isdigit() and text.isdigit() and int(found) >= int(text)):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never held {text!r}")


def test_the_in_process_api_streams_a_decoupled_model(repo: Path) -> None:
    """``Server.stream`` (a server started in a thread): responses as the model sends them;
    leaving the loop early cancels the request in the model."""
    progress = counter(repo, "counter_in_process")
    config = ServerConfig(model_repository=repo, http_port=0, grpc_port=0, metrics_port=0)
    server = Server(config).start_in_thread()
    try:
        items = list(server.stream(request("square_int32", IN=np.array([3], np.int32))))
        assert [i.response.outputs[0].data.tolist() for i in items if i.response] == [[3]] * 3
        assert items[-1].final
        endless = request("counter_in_process", IN=np.array([10**6, -1], np.int32))
        for item in server.stream(endless):
            assert item.response is not None
            break  # the client goes away
        deadline = time.monotonic() + 30
        while not progress.exists() or progress.read_text() != "cancelled":
            assert time.monotonic() < deadline, "the model was not told"
            time.sleep(0.02)
    finally:
        server.stop_thread()


async def test_the_next_batch_runs_while_the_last_ones_threads_still_send(
    engine: InferenceEngine,
) -> None:
    """repeat_int32 has one instance. Its first request answers once at once and again
    after 2 s, from a thread, with execute long returned; a second request sent meanwhile
    is served by the same instance before the first one ends, as in Triton."""
    slow = request(
        "repeat_int32",
        IN=np.array([1, 2], np.int32),
        DELAY=np.array([0, 2000], np.uint32),
        WAIT=np.array([0], np.uint32),
    )
    stream = await engine.stream(slow)
    items = aiter(stream)
    first = await anext(items)  # the batch runs, and its execute returned at once
    assert first.response is not None and not first.final
    rest = asyncio.create_task(read_all_of(items))
    quick = request(
        "repeat_int32",
        IN=np.array([3], np.int32),
        DELAY=np.array([0], np.uint32),
        WAIT=np.array([0], np.uint32),
    )
    answered = await read_all(engine, quick)
    assert answered[-1].final
    assert not rest.done()  # the first request still has its last response to come
    assert [item.final for item in await rest] == [False, True]


async def read_all_of(items: AsyncIterator[StreamedResponse]) -> list[StreamedResponse]:
    return [item async for item in items]


#: per request, a thread that sends one response, then (IN = 0) waits without sending until
#: the request is cancelled, writing "cancelled" to the file PROGRESS names, or (IN = 1)
#: ends the worker process; execute returns at once
LINGER = """
import json, os, threading, time
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.progress = json.loads(args["model_config"])["parameters"]["progress"]["string_value"]

    def execute(self, requests):
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            threading.Thread(target=self._linger, args=(request, mode), daemon=True).start()
        return None

    def _linger(self, request, mode):
        sender = request.get_response_sender()
        out = pb_utils.Tensor("OUT", np.array([mode], np.int32))
        sender.send(pb_utils.InferenceResponse([out]))
        if mode == 1:
            os._exit(3)
        deadline = time.monotonic() + 20
        while not request.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.005)
        if request.is_cancelled():
            open(self.progress, "w").write("cancelled")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

LINGER_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters [ {{ key: "progress" value {{ string_value: "{progress}" }} }} ]
"""


@pytest.fixture
async def linger(repo: Path) -> AsyncIterator[tuple[InferenceEngine, Path]]:
    progress = repo / "linger.progress"
    decoupled.write_model(repo, "linger", LINGER, LINGER_CONFIG.format(progress=progress))
    engine = build_engine(ServerConfig(model_repository=repo, stream_queue_responses=BOUND))
    await engine.start()
    yield engine, progress
    await engine.stop()


async def test_a_request_still_sending_after_its_batch_sees_its_reader_go_away(
    linger: tuple[InferenceEngine, Path],
) -> None:
    """The model's thread sends nothing more (so no send fails to tell it); the request's
    batch ended long ago; its reader's going away reaches ``request.is_cancelled()``."""
    engine, progress = linger
    stream = await engine.stream(request("linger", IN=np.array([0], np.int32)))
    first = await anext(aiter(stream))
    assert first.response is not None and not first.final
    await asyncio.sleep(0.1)  # its execute returned: the instance is free
    stream.close()
    await wait_for_text(progress, "cancelled")


async def test_a_request_still_sending_gets_an_error_when_its_worker_dies(
    linger: tuple[InferenceEngine, Path],
) -> None:
    engine, _ = linger
    items = await read_all(engine, request("linger", IN=np.array([1], np.int32)))
    assert items[0].response is not None
    assert items[-1].final and items[-1].error is not None
    assert "worker process ended" in items[-1].error.message
    # the instance's worker is replaced: the model serves on
    stream = await engine.stream(request("linger", IN=np.array([0], np.int32)))
    assert (await anext(aiter(stream))).response is not None
    stream.close()


#: a decoupled model that calls square_int32 (a unary call with IN = 1, then a streamed one
#: with its own IN) and sends each answer on as its own response: its calls and its
#: responses share the worker's link pipe
RELAY = """
import numpy as np
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            n = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()
            one = pb_utils.Tensor("IN", np.array([1], np.int32))
            answer = pb_utils.InferenceRequest("square_int32", [one], ["OUT"]).exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            sender.send(answer)
            call = pb_utils.InferenceRequest("square_int32", [pb_utils.Tensor("IN", n)], ["OUT"])
            for response in call.exec(decoupled=True):
                if pb_utils.get_output_tensor_by_name(response, "OUT") is not None:
                    sender.send(response)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

RELAY_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


async def test_a_decoupled_model_calls_other_models_between_its_responses(repo: Path) -> None:
    decoupled.write_model(repo, "relay", RELAY, RELAY_CONFIG)
    engine = build_engine(ServerConfig(model_repository=repo))
    await engine.start()
    try:
        items = await read_all(engine, request("relay", IN=np.array([3], np.int32)))
    finally:
        await engine.stop()
    assert [i.error for i in items] == [None] * len(items)
    data = [i.response.outputs[0].data.tolist() for i in items if i.response]
    assert data == [[1], [3], [3], [3]] and items[-1].final
