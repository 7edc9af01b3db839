"""The gRPC frontend over real sockets.

First against the `server` fixture (a real `inferplex serve` process) with Triton's own
tritonclient.grpc and with a raw channel using our message classes; then an in-process
GrpcFrontend over a stub engine, for what a real repository cannot provoke (a crashing
engine, message size limits, a port clash).
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from inferplex.config.server_config import ServerConfig
from inferplex.core.registry import ModelRegistry
from inferplex.core.streaming import SingleResponse
from inferplex.errors import (
    ConfigError,
    InferplexError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    PayloadTooLargeError,
    ServerBusyError,
    UnsupportedError,
)
from inferplex.frontends.grpc import GrpcFrontend
from inferplex.protocol.v2 import generated as pb
from inferplex.shm import SharedMemoryRegistry
from inferplex.transport.servers import GRPC_SERVERS
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BYTES": np.object_,
}  # fmt: skip
SERVICE = "/inference.GRPCInferenceService/"


@pytest.fixture(scope="module")
def client(twin_server) -> Any:
    """A client of the built-in server, then of its reference twin (tests/conftest.py)."""
    with grpcclient.InferenceServerClient(twin_server.grpc_url) as triton:
        yield triton


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[Any]:
    inputs = [grpcclient.InferInput(n, list(a.shape), "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def status_of(call) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value.status(), info.value.message()


def test_health(client) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert not client.is_model_ready("broken")


def test_server_and_model_metadata(client) -> None:
    server = client.get_server_metadata()
    assert server.name and server.version
    assert "statistics" in server.extensions
    model = client.get_model_metadata("add_sub")
    assert model.name == "add_sub"
    assert model.versions
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
        ("INPUT0", "FP32", [-1, 16]),
        ("INPUT1", "FP32", [-1, 16]),
    ]
    assert {t.name for t in model.outputs} == {"OUTPUT0", "OUTPUT1"}


def test_model_config(client) -> None:
    config = client.get_model_config("add_sub").config
    assert config.name == "add_sub"
    assert config.max_batch_size == 8
    fp32 = grpcclient.model_config_pb2.DataType.Value("TYPE_FP32")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("INPUT0", fp32, [16]),
        ("INPUT1", fp32, [16]),
    ]
    assert {t.name for t in config.output} == {"OUTPUT0", "OUTPUT1"}


def test_add_sub(client) -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((3, 16), dtype=np.float32) for _ in range(2))
    result = client.infer("add_sub", add_sub_inputs(a, b), request_id="req-42")
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    response = result.get_response()
    assert response.id == "req-42"
    assert response.model_name == "add_sub" and response.model_version


def test_requested_outputs(client) -> None:
    a = np.ones((1, 16), dtype=np.float32)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = client.infer("add_sub", add_sub_inputs(a, a * 3), outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), -2 * a)


@pytest.mark.parametrize("datatype", list(NUMPY))
def test_identity_round_trips_every_datatype(client, datatype: str) -> None:
    if datatype == "BYTES":
        # UTF-8 only: ONNX Runtime string tensors cannot hold other bytes (the codec's unit
        # tests cover arbitrary bytes).
        data = np.array([[b"", b"abc", "é".encode(), b"nul\x00"]], dtype=np.object_)
    elif datatype == "BOOL":
        data = np.array([[True, False, True, True]])
    else:
        data = np.arange(8).reshape(2, 4).astype(NUMPY[datatype])
    infer_input = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
    infer_input.set_data_from_numpy(data)
    result = client.infer(f"identity_{datatype.lower()}", [infer_input])
    out = result.as_numpy("OUTPUT0")
    assert result.get_output("OUTPUT0").datatype == datatype
    assert out.shape == data.shape
    assert out.tolist() == data.tolist()


def test_statistics_count_inferences(client) -> None:
    def counts() -> tuple[int, int]:
        (stats,) = client.get_inference_statistics("add_sub").model_stats
        assert stats.name == "add_sub" and stats.version
        return stats.inference_count, stats.inference_stats.success.count

    before = counts()
    a = np.zeros((2, 16), dtype=np.float32)
    client.infer("add_sub", add_sub_inputs(a, a))
    after = counts()
    assert after[0] >= before[0] + 2  # every batch element counts
    assert after[1] >= before[1] + 1
    everything = client.get_inference_statistics().model_stats
    assert "add_sub" in {s.name for s in everything}


def test_repository_index_lists_broken_with_reason(client) -> None:
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["add_sub"].state == "READY"
    assert index["broken"].state == "UNAVAILABLE"
    assert index["broken"].reason
    ready = {m.name for m in client.get_model_repository_index().models if m.state == "READY"}
    assert "broken" not in ready


def test_model_control_is_refused_in_mode_none(client) -> None:
    # the server fixture runs with the default --model-control-mode none (as Triton does)
    status, message = status_of(lambda: client.load_model("add_sub"))
    assert status == "StatusCode.UNAVAILABLE" and "--model-control-mode" in message
    status, _ = status_of(lambda: client.unload_model("add_sub"))
    assert status == "StatusCode.UNAVAILABLE"


def test_unknown_model_and_version_are_not_found(client) -> None:
    a = np.zeros((1, 16), dtype=np.float32)
    for call in (
        lambda: client.infer("no_such_model", add_sub_inputs(a, a)),
        lambda: client.infer("add_sub", add_sub_inputs(a, a), model_version="99"),
        lambda: client.get_model_metadata("no_such_model"),
        lambda: client.get_model_config("add_sub", model_version="99"),
        lambda: client.is_model_ready("no_such_model"),
        lambda: client.get_inference_statistics("no_such_model"),
    ):
        status, message = status_of(call)
        assert status == "StatusCode.NOT_FOUND", message
        # Triton's words, which its clients and examples look for
        assert message.startswith("Request for unknown model: "), message


@pytest.mark.parametrize(
    ("shape", "datatype", "words"),
    [
        ((9, 16), "FP32", "batch"),  # above max_batch_size 8
        ((1, 15), "FP32", "INPUT0"),
        ((1, 16), "FP64", "INPUT0"),
    ],
)
def test_bad_inputs_are_invalid_argument(client, shape, datatype, words) -> None:
    inputs = [grpcclient.InferInput(n, list(shape), datatype) for n in ("INPUT0", "INPUT1")]
    for infer_input in inputs:
        infer_input.set_data_from_numpy(np.zeros(shape, dtype=NUMPY[datatype]))
    status, message = status_of(lambda: client.infer("add_sub", inputs))
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert words.lower() in message.lower()
    a = np.ones((1, 16), dtype=np.float32)  # and the server still answers
    np.testing.assert_array_equal(
        client.infer("add_sub", add_sub_inputs(a, a)).as_numpy("OUTPUT0"), 2 * a
    )


def test_missing_input_is_invalid_argument(client) -> None:
    only = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    only.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    status, message = status_of(lambda: client.infer("add_sub", [only]))
    assert status == "StatusCode.INVALID_ARGUMENT" and "INPUT1" in message


# ---- a raw channel with our own message classes ----


def unary(channel: grpc.Channel, method: str, response_class: Any) -> Any:
    return channel.unary_unary(
        SERVICE + method,
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=response_class.FromString,
    )


@pytest.fixture(scope="module")
def channel(twin_server) -> Any:
    with grpc.insecure_channel(twin_server.grpc_url) as raw_channel:
        yield raw_channel


def typed_request(a: list[float], b: list[float], **contents_a: Any) -> Any:
    return pb.ModelInferRequest(
        model_name="add_sub",
        id="typed",
        inputs=[
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
             "contents": contents_a or {"fp32_contents": a}},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16],
             "contents": {"fp32_contents": b}},
        ],
    )  # fmt: skip


def test_raw_channel_typed_contents(channel) -> None:
    a, b = [float(i) for i in range(16)], [0.5] * 16
    response = unary(channel, "ModelInfer", pb.ModelInferResponse)(typed_request(a, b))
    assert response.id == "typed"
    by_name = dict(zip((o.name for o in response.outputs), response.raw_output_contents,
                       strict=True))  # fmt: skip
    np.testing.assert_array_equal(np.frombuffer(by_name["OUTPUT0"], "<f4"), np.add(a, b))
    np.testing.assert_array_equal(np.frombuffer(by_name["OUTPUT1"], "<f4"), np.subtract(a, b))
    live = unary(channel, "ServerLive", pb.ServerLiveResponse)(pb.ServerLiveRequest())
    assert live.live


def test_raw_channel_bad_contents_name_the_field(channel) -> None:
    infer = unary(channel, "ModelInfer", pb.ModelInferResponse)
    cases = [
        typed_request([0.0] * 16, [0.0] * 15),
        typed_request([], [0.0] * 16, int64_contents=[0] * 16),
    ]
    mixed = typed_request([0.0] * 16, [0.0] * 16)
    mixed.raw_input_contents.extend([b"\x00" * 64, b"\x00" * 64])
    cases.append(mixed)
    for message, words in zip(cases, ("contents.fp32_contents", "int64_contents",
                                      "raw_input_contents"), strict=True):  # fmt: skip
        with pytest.raises(grpc.RpcError) as info:
            infer(message)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert words in info.value.details()


def test_stream_infer_answers_an_ordinary_model_once_per_request(channel) -> None:
    """The raw stub: each request of the stream gets its one response, with its id; an
    error goes in the stream and the stream goes on."""
    stream = channel.stream_stream(
        SERVICE + "ModelStreamInfer",
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    first, second = typed_request([1.0] * 16, [2.0] * 16), typed_request([5.0] * 16, [1.0] * 16)
    first.id, second.id = "first", "second"
    missing = pb.ModelInferRequest(model_name="no_such_model", id="missing")
    answers = list(stream(iter([first, missing, second])))
    assert len(answers) == 3
    by_id = {a.infer_response.id: a for a in answers}
    assert "unknown model: 'no_such_model'" in by_id["missing"].error_message
    outputs = {
        key: np.frombuffer(by_id[key].infer_response.raw_output_contents[0], np.float32)
        for key in ("first", "second")
    }
    assert outputs["first"].tolist() == [3.0] * 16 and outputs["second"].tolist() == [6.0] * 16


# ---- in-process frontend over a stub engine ----


class StubEngine:
    """Answers like the engine; `fail_with` makes every call raise that exception."""

    def __init__(self) -> None:
        self.fail_with: Exception | None = None
        self.shared_memory = SharedMemoryRegistry(enabled=False)
        self.registry = ModelRegistry()  # its status signal feeds health Watch

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    def live(self) -> bool:
        self._check()
        return True

    def ready(self) -> bool:
        return True

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self._check()
        (tensor,) = request.inputs
        out = Tensor("OUTPUT0", tensor.datatype, tensor.shape, tensor.data)
        return InferenceResponse(request.model_name, "1", [out], id=request.id)

    async def stream(self, request: InferenceRequest) -> SingleResponse:
        return SingleResponse(functools.partial(self.infer, request))


def stub_frontend(
    engine: StubEngine, repository: Path, grpc_server: str = "builtin", **settings: Any
) -> GrpcFrontend:
    """A frontend on the built-in server, or on its reference twin ("grpcio")."""
    config = ServerConfig(model_repository=repository, **{"grpc_port": 0, **settings})
    return GrpcFrontend(engine, config, server=GRPC_SERVERS[grpc_server])


@pytest.fixture(params=["builtin", "grpcio"])
def grpc_server(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def stub(tmp_path: Path, grpc_server: str) -> Any:
    engine = StubEngine()
    frontend = stub_frontend(engine, tmp_path, grpc_server, max_grpc_message_bytes=4096)
    port = await frontend.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as aio_channel:
        yield engine, aio_channel, port
    await frontend.stop(0)


def echo_request(size: int) -> Any:
    return pb.ModelInferRequest(
        model_name="echo",
        inputs=[{"name": "INPUT0", "datatype": "UINT8", "shape": [size]}],
        raw_input_contents=[bytes(range(256)) * (size // 256) + bytes(size % 256)],
    )


async def test_stub_echo_and_limits(stub) -> None:
    _, aio_channel, _ = stub
    infer = unary(aio_channel, "ModelInfer", pb.ModelInferResponse)
    response = await infer(echo_request(1000))
    assert response.raw_output_contents[0] == echo_request(1000).raw_input_contents[0]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await infer(echo_request(8192))  # above max_grpc_message_bytes
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await infer(echo_request(10))).outputs[0].name == "OUTPUT0"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidInputError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (ModelNotFoundError("gone"), grpc.StatusCode.NOT_FOUND),
        (ModelNotReadyError("loading"), grpc.StatusCode.UNAVAILABLE),
        (ServerBusyError("full"), grpc.StatusCode.UNAVAILABLE),
        (PayloadTooLargeError("big"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (UnsupportedError("no"), grpc.StatusCode.UNIMPLEMENTED),
        (InferplexError("boom"), grpc.StatusCode.INTERNAL),
        (ZeroDivisionError("oops"), grpc.StatusCode.INTERNAL),
    ],
)
async def test_stub_errors_map_to_status_codes(stub, error, code) -> None:
    engine, aio_channel, _ = stub
    engine.fail_with = error
    for method, request, response_class in (
        ("ModelInfer", echo_request(4), pb.ModelInferResponse),
        ("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await unary(aio_channel, method, response_class)(request)
        assert info.value.code() is code
        assert str(error) in info.value.details()
    engine.fail_with = None  # the frontend keeps serving
    assert (
        await unary(aio_channel, "ServerLive", pb.ServerLiveResponse)(pb.ServerLiveRequest())
    ).live


async def test_stub_port_clash_fails_loudly(stub, tmp_path, grpc_server) -> None:
    _, _, port = stub
    clash = stub_frontend(StubEngine(), tmp_path, grpc_server, grpc_port=port)
    with pytest.raises(ConfigError, match=f"cannot listen for gRPC on 127.0.0.1:{port}"):
        await clash.start()


async def test_stop_closes_the_port(tmp_path, grpc_server) -> None:
    frontend = stub_frontend(StubEngine(), tmp_path, grpc_server)
    port = await frontend.start()
    await frontend.stop(0)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
