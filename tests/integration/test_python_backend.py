"""The Python backend over real sockets: handlers of both styles, BYTES decoded in preprocess,
calls to other served models (BLS), and crashes, exceptions and hangs that fail only their
own requests, served by a real `inferplex serve` process and driven by tritonclient."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from examples import modelgen
from examples.build_models import digits_reader
from inferplex import InferenceRequest, ServerConfig, Tensor
from inferplex.config.writers import write_config
from inferplex.errors import ModelExecutionError
from inferplex.server import build_engine
from inferplex_tools.benchtool.launch import RunningServer, start_server

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }} ]
dynamic_batching {{ }}
parameters [ {{ key: "execute_timeout_seconds" value {{ string_value: "1" }} }} ]
"""

#: TorchServe style, vectorised; the first value of INPUT0 picks a failure to act out
NATIVE = """
import os, time
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        a, b = data["INPUT0"], data["INPUT1"]
        if a[0, 0] == -1:
            raise RuntimeError("asked to fail")
        if a[0, 0] == -2:
            os._exit(9)
        if a[0, 0] == -3:
            time.sleep(30)
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
"""

#: Triton python-backend style with the import changed; calls the ONNX add_sub (BLS)
TRITON_BLS = """
import json
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(config, "OUTPUT0")
        self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            if inputs[0].as_numpy()[0, 0] == -5:
                code = pb_utils.TritonError.INVALID_ARG
                error = pb_utils.TritonError("INPUT0 starts with -5", code)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            call = pb_utils.InferenceRequest(
                model_name="add_sub", inputs=inputs, requested_output_names=["OUTPUT0", "OUTPUT1"]
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            diff = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", (total * 10).astype(self.dtype)),
                pb_utils.Tensor("OUTPUT1", diff.astype(self.dtype)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


#: Triton style: each client request answered on its own, by its id and parameters
ECHO = """
import json, time
from inferplex.handler import triton as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)  # requests arriving meanwhile queue into the next batch
        responses = []
        for request in requests:
            parameters = json.loads(request.parameters())
            if parameters.get("fail"):
                why = f"request {request.request_id()} asked to fail"
                error = pb_utils.TritonError(why, pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", a * float(parameters.get("scale", 1))),
                pb_utils.Tensor("OUTPUT1", a * 0 + len(request.request_id())),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

#: py_bls as the one step of an ensemble
PIPELINE = """
name: "py_pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [ {
  model_name: "py_bls" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
"""


def python_model(repo: Path, name: str, code: str, instances: int = 1) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    group = f"instance_group [ {{ kind: KIND_CPU count: {instances} }} ]\n"
    (repo / name / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(name=name) + group)


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def python_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("python_repo")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    path = modelgen.digits_mlp(repo, epochs=20).path  # the shape is what matters here
    write_config(repo / "digits_mlp", modelgen.model_config(path, max_batch_size=32))
    digits_reader(repo)
    python_model(repo, "py_add_sub", NATIVE)
    python_model(repo, "py_bls", TRITON_BLS)
    python_model(repo, "py_echo", ECHO)
    (repo / "py_pipeline" / "1").mkdir(parents=True)
    (repo / "py_pipeline" / "config.pbtxt").write_text(PIPELINE)
    server = start_server(repo, tmp_path_factory.mktemp("python_log") / "server.log")
    yield server
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log()}"


def infer_add_sub(protocol: str, server: RunningServer, model: str, first: float = 1.0) -> Any:
    """Run an add_sub-shaped model with a (2, 16) batch; returns (a, b, result)."""
    client_module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    a[0, 0] = first
    b = np.full((2, 16), 0.5, dtype=np.float32)
    inputs = [client_module.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    client = client_module.InferenceServerClient(url)
    try:
        return a, b, client.infer(model, inputs)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_handler_answers_over_both_protocols(python_server: RunningServer, protocol: str) -> None:
    a, b, result = infer_add_sub(protocol, python_server, "py_add_sub")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_metadata_and_config_name_the_python_backend(python_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(python_server.http_url)
    try:
        assert client.get_model_metadata("py_add_sub")["platform"] == "python"
        config = client.get_model_config("py_add_sub")
        assert config["backend"] == "python"
        assert config["default_model_filename"] == "model.py"
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_triton_style_model_calls_an_onnx_model_in_process(
    python_server: RunningServer, protocol: str
) -> None:
    a, b, result = infer_add_sub(protocol, python_server, "py_bls")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), (a + b) * 10)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["py_bls", "py_pipeline"])
def test_a_triton_error_response_keeps_its_code(
    python_server: RunningServer, protocol: str, model: str
) -> None:
    """TritonError.INVALID_ARG is a client error, also from a step of an ensemble."""
    with pytest.raises(InferenceServerException) as failed:
        infer_add_sub(protocol, python_server, model, first=-5)
    assert "INPUT0 starts with -5" in failed.value.message()
    status = failed.value.status()
    assert status in ("400", "StatusCode.INVALID_ARGUMENT"), status
    if model == "py_pipeline":
        assert "step 1 'py_bls'" in failed.value.message()


def echo(protocol: str, server: RunningServer, request_id: str, **parameters: Any) -> Any:
    client_module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    inputs = [client_module.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    client = client_module.InferenceServerClient(url)
    try:
        return client.infer("py_echo", inputs, request_id=request_id, parameters=parameters)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_triton_model_sees_each_requests_id_and_parameters(
    python_server: RunningServer, protocol: str
) -> None:
    """Sent at once, they may share batches: each is still one request with its own id and
    parameters, and the one that fails fails alone with its code."""
    wanted = [(f"id-{'x' * n}", n) for n in range(1, 7)]
    with ThreadPoolExecutor(len(wanted) + 1) as pool:
        answers = [
            pool.submit(echo, protocol, python_server, request_id, scale=scale)
            for request_id, scale in wanted
        ]
        failing = pool.submit(echo, protocol, python_server, "no", fail=True)
        for (request_id, scale), answer in zip(wanted, answers, strict=True):
            result = answer.result()
            assert result.as_numpy("OUTPUT0").tolist() == [[float(scale)] * 16]
            assert result.as_numpy("OUTPUT1").tolist() == [[float(len(request_id))] * 16]
        with pytest.raises(InferenceServerException) as failed:
            failing.result()
    assert "request no asked to fail" in failed.value.message()
    assert failed.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def pgm(grid: np.ndarray, scale: int) -> bytes:
    """An 8x8 digit (values 0..16) as a binary PGM image, each pixel a scale x scale block."""
    pixels = np.kron(grid.reshape(8, 8), np.ones((scale, scale))) * 255 / 16
    side = 8 * scale
    return b"P5\n%d %d\n255\n" % (side, side) + pixels.round().astype(np.uint8).tobytes()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_raw_image_bytes_are_decoded_in_preprocess(
    python_server: RunningServer, digits: tuple[np.ndarray, np.ndarray], protocol: str
) -> None:
    """digits_reader (the example) decodes PGM files and calls digits_mlp: its answers match
    digits_mlp's own on the same pixels."""
    import json

    features, _ = digits
    grids = features[:6].astype(np.float32)
    scales = (1, 2, 4, 4, 2, 1)
    images = np.array([[pgm(g, s)] for g, s in zip(grids, scales, strict=True)], dtype=object)
    client_module = httpclient if protocol == "http" else grpcclient
    url = python_server.http_url if protocol == "http" else python_server.grpc_url
    client = client_module.InferenceServerClient(url)
    try:
        image_input = client_module.InferInput("image", [6, 1], "BYTES")
        image_input.set_data_from_numpy(images)
        answers = client.infer("digits_reader", [image_input]).as_numpy("prediction")
        pixels_input = client_module.InferInput("pixels", [6, 64], "FP32")
        # what the reader computes: 8-bit pixels, scaled back to 0..16
        pixels_input.set_data_from_numpy(((grids * 255 / 16).round() / 255 * 16).astype(np.float32))
        expected = client.infer("digits_mlp", [pixels_input]).as_numpy("label").reshape(-1)
    finally:
        client.close()
    assert answers.shape == (6, 1)
    predictions = [json.loads(item) for item in answers[:, 0]]
    assert [p["digit"] for p in predictions] == expected.tolist()
    assert all(0 < p["confidence"] <= 1 for p in predictions)


@pytest.mark.parametrize(
    ("protocol", "first", "message"),
    [
        ("http", -1.0, "the handler failed: RuntimeError: asked to fail (model.py line"),
        ("grpc", -1.0, "the handler failed: RuntimeError: asked to fail"),
        ("http", -2.0, "worker process died while running the request (exited with code 9)"),
        ("grpc", -2.0, "worker process died while running the request (exited with code 9)"),
        ("http", -3.0, "did not answer within 1 s (parameter execute_timeout_seconds)"),
    ],
    ids=["exception-http", "exception-grpc", "crash-http", "crash-grpc", "hang-http"],
)
def test_failures_fail_only_their_request_and_the_model_recovers(
    python_server: RunningServer, protocol: str, first: float, message: str
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        infer_add_sub(protocol, python_server, "py_add_sub", first)
    assert "model 'py_add_sub'" in caught.value.message()
    assert message in caught.value.message()
    assert caught.value.status() in ("500", "StatusCode.INTERNAL")
    a, b, result = infer_add_sub(protocol, python_server, "py_add_sub")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


async def test_handlers_waiting_on_calls_do_not_starve_the_models_they_call(
    tmp_path: Path,
) -> None:
    """Two handler instances calling an ONNX model, one compute slot in the whole server:
    the handlers hold no slot while they wait, so the ONNX batches get it."""
    path = modelgen.add_sub(tmp_path)
    write_config(tmp_path / "add_sub", modelgen.model_config(path, max_batch_size=8))
    python_model(tmp_path, "py_bls", TRITON_BLS, instances=2)
    engine = build_engine(ServerConfig(model_repository=tmp_path, max_concurrent_batches=1))
    await engine.start()
    try:
        a = np.ones((1, 16), np.float32)
        request = InferenceRequest(
            "py_bls", [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", a.shape, a)]
        )
        answers = await asyncio.wait_for(
            asyncio.gather(*(engine.infer(request) for _ in range(12))), timeout=60
        )
    finally:
        await engine.stop()
    for answer in answers:
        np.testing.assert_array_equal(answer.outputs[0].data, np.full((1, 16), 20.0))


CALLS_MISSING = """
from inferplex.handler import BaseHandler, ModelCallError, infer

class Handler(BaseHandler):
    def inference(self, data):
        try:
            infer("no_such_model", {"X": data["INPUT0"]})
        except ModelCallError as exc:
            raise RuntimeError(f"call failed with {exc.code}: {exc.message}") from None
"""


async def test_a_failing_call_reports_the_servers_error_to_the_handler(tmp_path: Path) -> None:
    python_model(tmp_path, "py_calls_missing", CALLS_MISSING)
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    await engine.start()
    a = np.ones((1, 16), np.float32)
    request = InferenceRequest(
        "py_calls_missing",
        [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", a.shape, a)],
    )
    try:
        with pytest.raises(ModelExecutionError) as caught:
            await engine.infer(request)
    finally:
        await engine.stop()
    assert (
        "call failed with not_found: Request for unknown model: 'no_such_model' is not found"
        in caught.value.message
    )
