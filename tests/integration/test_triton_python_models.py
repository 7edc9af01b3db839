"""Triton Python models as Triton ships them (``import triton_python_backend_utils as
pb_utils``, nothing changed), served by a real ``inferplex serve`` process and called with
tritonclient over HTTP and gRPC: a simple identity model, BLS naming the model with a BYTES
input's element (sync) and with ``async def execute`` + ``async_exec`` (async), a model with
no config file completed by its ``auto_complete_config``, custom metrics on ``/metrics``,
``pb_utils.Logger`` in the server's log, and a model using what inferplex lacks failing at
load with the name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from inferplex_tools.benchtool.launch import RunningServer, start_server

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

#: Triton's add_sub example, as its examples/add_sub/model.py is written
ADD_SUB = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (
                in_0.as_numpy() + in_1.as_numpy(),
                in_0.as_numpy() - in_1.as_numpy(),
            )
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            inference_response = pb_utils.InferenceResponse(
                output_tensors=[out_tensor_0, out_tensor_1]
            )
            responses.append(inference_response)
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

#: Triton's "pytorch" model of the BLS example stands in: OUTPUT0 = a * b, OUTPUT1 = a / b
MUL_DIV = ADD_SUB.replace("in_0.as_numpy() + in_1", "in_0.as_numpy() * in_1").replace(
    "in_0.as_numpy() - in_1", "in_0.as_numpy() / in_1"
)

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""

#: Triton's simple_identity: a BYTES tensor in, the same out
IDENTITY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            out_tensor = pb_utils.Tensor("OUTPUT0", in_0.as_numpy())
            responses.append(pb_utils.InferenceResponse([out_tensor]))
        return responses
"""

IDENTITY_CONFIG = """
name: "simple_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

#: Triton's BLS sync example: the model to call is named by the MODEL_NAME input
BLS_SYNC = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME")
            model_name_string = model_name.as_numpy()[0]
            infer_request = pb_utils.InferenceRequest(
                model_name=model_name_string,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[in_0, in_1],
            )
            infer_response = infer_request.exec()
            if infer_response.has_error():
                raise pb_utils.TritonModelException(infer_response.error().message())
            responses.append(
                pb_utils.InferenceResponse(output_tensors=infer_response.output_tensors())
            )
        return responses
"""

BLS_SYNC_CONFIG = """
name: "bls_sync"
backend: "python"
input [ { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

#: Triton's BLS async example: two models called at once with async_exec
BLS_ASYNC = """
import asyncio
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            inference_response_awaits = []
            for model_name in ["mul_div", "add_sub"]:
                infer_request = pb_utils.InferenceRequest(
                    model_name=model_name,
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=[in_0, in_1],
                )
                inference_response_awaits.append(infer_request.async_exec())
            inference_responses = await asyncio.gather(*inference_response_awaits)
            for infer_response in inference_responses:
                if infer_response.has_error():
                    raise pb_utils.TritonModelException(infer_response.error().message())
            mul = pb_utils.get_output_tensor_by_name(inference_responses[0], "OUTPUT0")
            sub = pb_utils.get_output_tensor_by_name(inference_responses[1], "OUTPUT1")
            responses.append(pb_utils.InferenceResponse(output_tensors=[mul, sub]))
        return responses
"""

#: Triton's auto_complete example (batch_model.py): no config file at all
AUTO_COMPLETE = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                  {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
        outputs = [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                   {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}]
        config = auto_complete_model_config.as_dict()
        input_names = [i["name"] for i in config["input"]]
        output_names = [o["name"] for o in config["output"]]
        for input in inputs:
            if input["name"] not in input_names:
                auto_complete_model_config.add_input(input)
        for output in outputs:
            if output["name"] not in output_names:
                auto_complete_model_config.add_output(output)
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        print("auto_complete_config ran")  # goes to the log, not into the config
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

#: Triton's custom_metrics example, with a gauge and a histogram beside its counter
CUSTOM_METRICS = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.requests = pb_utils.MetricFamily(
            name="custom_requests", description="Requests seen",
            kind=pb_utils.MetricFamily.COUNTER,
        ).Metric(labels={"model": "custom_metrics", "version": "1"})
        self.last = pb_utils.MetricFamily(
            "custom_last_sum", "Sum of the last request's INPUT0", pb_utils.MetricFamily.GAUGE
        ).Metric(labels={"model": "custom_metrics"})
        self.sizes = pb_utils.MetricFamily(
            "custom_sum_sizes", "Sums of INPUT0", pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels={"model": "custom_metrics"}, buckets=[1.0, 10.0, 100.0])
        pb_utils.Logger.log_info("custom_metrics initialized: Logger reaches the server log")

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            self.requests.increment(1)
            self.last.set(float(a.sum()))
            self.sizes.observe(float(a.sum()))
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        pb_utils.Logger.log_verbose(f"requests so far: {self.requests.value()}")
        return responses
"""

#: uses Triton's model loading API, which inferplex does not offer: must fail at load
USES_LOAD_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        if not pb_utils.is_model_ready(model_name="add_sub"):
            pb_utils.load_model(model_name="add_sub")
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


def python_model(repo: Path, name: str, code: str, config: str | None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("triton_models")
    python_model(repo, "add_sub", ADD_SUB, ADD_SUB_CONFIG.format(name="add_sub"))
    python_model(repo, "mul_div", MUL_DIV, ADD_SUB_CONFIG.format(name="mul_div"))
    python_model(repo, "simple_identity", IDENTITY, IDENTITY_CONFIG)
    python_model(repo, "bls_sync", BLS_SYNC, BLS_SYNC_CONFIG)
    python_model(repo, "bls_async", BLS_ASYNC, ADD_SUB_CONFIG.format(name="bls_async"))
    python_model(repo, "auto_complete", AUTO_COMPLETE, None)
    python_model(
        repo, "custom_metrics", CUSTOM_METRICS, ADD_SUB_CONFIG.format(name="custom_metrics")
    )
    python_model(
        repo, "uses_load_model", USES_LOAD_MODEL, ADD_SUB_CONFIG.format(name="uses_load_model")
    )
    running = start_server(repo, tmp_path_factory.mktemp("triton_log") / "server.log")
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def client_for(protocol: str, server: RunningServer) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def infer(protocol: str, server: RunningServer, model: str, tensors: dict[str, np.ndarray]) -> Any:
    module = httpclient if protocol == "http" else grpcclient
    inputs = []
    for name, array in tensors.items():
        datatype = "BYTES" if array.dtype == np.object_ else "FP32"
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client = client_for(protocol, server)
    try:
        return client.infer(model, inputs)
    finally:
        client.close()


A = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
B = np.array([0.5, 0.25, 2.0, 8.0], np.float32)

PROTOCOLS = pytest.mark.parametrize("protocol", ["http", "grpc"])


@PROTOCOLS
def test_simple_identity_echoes_bytes(server: RunningServer, protocol: str) -> None:
    data = np.array([[b"hello", b"\x00bytes\xff"]], dtype=np.object_)
    result = infer(protocol, server, "simple_identity", {"INPUT0": data})
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


@PROTOCOLS
def test_bls_names_the_model_with_a_bytes_element(server: RunningServer, protocol: str) -> None:
    name = np.array([b"add_sub"], dtype=np.object_)
    result = infer(protocol, server, "bls_sync", {"MODEL_NAME": name, "INPUT0": A, "INPUT1": B})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


@PROTOCOLS
def test_async_execute_gathers_async_exec_calls(server: RunningServer, protocol: str) -> None:
    result = infer(protocol, server, "bls_async", {"INPUT0": A, "INPUT1": B})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


@PROTOCOLS
def test_a_model_without_a_config_file_completes_its_own(
    server: RunningServer, protocol: str
) -> None:
    client = client_for(protocol, server)
    try:
        config = client.get_model_config("auto_complete")
    finally:
        client.close()
    if protocol == "grpc":
        config = {
            "max_batch_size": config.config.max_batch_size,
            "input": [{"name": i.name, "dims": list(i.dims)} for i in config.config.input],
            "dynamic_batching": config.config.HasField("dynamic_batching") or None,
        }
    assert config["max_batch_size"] == 4
    assert [(i["name"], [int(d) for d in i["dims"]]) for i in config["input"]] == [
        ("INPUT0", [4]),
        ("INPUT1", [4]),
    ]
    assert config.get("dynamic_batching") is not None
    rows = np.stack([A, B])
    result = infer(protocol, server, "auto_complete", {"INPUT0": rows, "INPUT1": rows})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), rows + rows)
    assert "auto_complete_config ran" in server.log()


def metric_lines(server: RunningServer) -> list[str]:
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    return [line for line in text.splitlines() if line.startswith("custom_")]


def test_custom_metrics_are_on_the_metrics_endpoint(server: RunningServer) -> None:
    infer("http", server, "custom_metrics", {"INPUT0": A, "INPUT1": B})
    infer("grpc", server, "custom_metrics", {"INPUT0": A * 10, "INPUT1": B})
    lines = metric_lines(server)
    labels = 'model="custom_metrics",version="1"'
    assert f"custom_requests{{{labels}}} 2.0" in lines
    assert 'custom_last_sum{model="custom_metrics"} 100.0' in lines
    # sums 10 and 100: one in the 10 bucket, both by 100
    assert 'custom_sum_sizes_bucket{model="custom_metrics",le="1.0"} 0' in lines
    assert 'custom_sum_sizes_bucket{model="custom_metrics",le="10.0"} 1' in lines
    assert 'custom_sum_sizes_bucket{model="custom_metrics",le="100.0"} 2' in lines
    assert 'custom_sum_sizes_count{model="custom_metrics"} 2' in lines
    assert 'custom_sum_sizes_sum{model="custom_metrics"} 110.0' in lines
    text = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    assert "# TYPE custom_requests counter" in text
    assert "# HELP custom_requests Requests seen" in text


def test_logger_lines_reach_the_server_log(server: RunningServer) -> None:
    log = server.log()
    assert "custom_metrics initialized: Logger reaches the server log" in log
    # log_verbose is DEBUG: not at the server's default level (info)
    assert "requests so far" not in log


def test_a_model_using_what_inferplex_lacks_fails_at_load(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert not client.is_model_ready("uses_load_model")
        index = {m["name"]: m for m in client.get_model_repository_index()}
    finally:
        client.close()
    reason = index["uses_load_model"].get("reason", "")
    assert index["uses_load_model"]["state"] == "UNAVAILABLE"
    assert "pb_utils.is_model_ready (line 6)" in reason
    assert "pb_utils.load_model (line 7)" in reason
    assert "the model loading API" in reason


def test_with_auto_complete_off_a_model_needs_its_config_file(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """tritonserver's --disable-auto-complete-config: auto_complete_config is not called."""
    repo = tmp_path_factory.mktemp("strict_models")
    python_model(repo, "auto_complete", AUTO_COMPLETE, None)
    python_model(repo, "add_sub", ADD_SUB, ADD_SUB_CONFIG.format(name="add_sub"))
    log = tmp_path_factory.mktemp("strict_log") / "server.log"
    running = start_server(repo, log, args=["--disable-auto-complete-config"])
    try:
        client = httpclient.InferenceServerClient(running.http_url)
        try:
            assert client.is_model_ready("add_sub")
            index = {m["name"]: m for m in client.get_model_repository_index()}
        finally:
            client.close()
    finally:
        assert running.stop() == 0
    assert index["auto_complete"]["state"] == "UNAVAILABLE"
    assert "no config file, and configs are not completed" in index["auto_complete"]["reason"]
    assert "auto_complete_config ran" not in running.log()
