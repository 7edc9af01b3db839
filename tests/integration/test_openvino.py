"""A CPU execution accelerator for real: ``optimization { execution_accelerators {
cpu_execution_accelerator [ { name: "openvino" } ] } }`` served by a real `inferplex serve`
process whose onnxruntime has the OpenVINO provider (the onnxruntime-openvino package), called
over HTTP. An accelerator ONNX Runtime refuses to start fails its model's load with the reason
in the repository index, or runs without it where the model declares the fallback.

The main test environment has the plain onnxruntime package, without the provider: there this
file is skipped, and ``scripts/openvino_test.sh`` runs it in an environment of its own. That
environment holds inferplex's core dependencies and pytest, nothing of the extras, so these
tests also show that a plain install serves (psutil was once missing from it)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from examples import modelgen
from inferplex.backends.ort_providers import FALLBACK_PARAMETER, OPENVINO
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

pytestmark = pytest.mark.skipif(
    OPENVINO not in ort.get_available_providers(),
    reason="this onnxruntime has no OpenVINOExecutionProvider (scripts/openvino_test.sh)",
)

IMAGE = np.random.default_rng(3).random((2, 3, 224, 224), dtype=np.float32)


def openvino(parameters: dict[str, str], fallback: bool = False) -> dict[str, Any]:
    """The config fields that ask for OpenVINO with ``parameters``."""
    fields: dict[str, Any] = {
        "optimization": {
            "execution_accelerators": {
                "cpu_execution_accelerator": [{"name": "openvino", "parameters": parameters}]
            }
        }
    }
    if fallback:
        fields["parameters"] = {FALLBACK_PARAMETER: {"string_value": "true"}}
    return fields


MODELS = {
    "cnn_openvino": openvino({"device_type": "CPU", "precision": "FP32"}),
    # OpenVINO on the CPU supports FP32 and ACCURACY: ONNX Runtime refuses FP16 and would
    # have run the model on its CPU provider
    "cnn_refused": openvino({"precision": "FP16"}),
    "cnn_refused_fallback": openvino({"precision": "FP16"}, fallback=True),
}


@pytest.fixture(scope="module")
def openvino_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("openvino_repo")
    for name, fields in MODELS.items():
        path = modelgen.small_cnn(repo, name=name)
        config = modelgen.model_config(path, max_batch_size=4)
        write_config(path.parent.parent, {**config, **fields})
    running = start_server(repo, tmp_path_factory.mktemp("openvino_server") / "server.log")
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def post(server: RunningServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def infer(server: RunningServer, model: str) -> np.ndarray:
    image = {"name": "image", "datatype": "FP32", "shape": list(IMAGE.shape)}
    body = {"inputs": [{**image, "data": IMAGE.ravel().tolist()}]}
    status, answer = post(server, f"/v2/models/{model}/infer", body)
    assert status == 200, answer
    (logits,) = answer["outputs"]
    return np.array(logits["data"], dtype=np.float32).reshape(logits["shape"])


def reference(server: RunningServer) -> np.ndarray:
    model = next(Path(server.repository).glob("cnn_openvino/*/model.onnx"))
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": IMAGE})[0]


def test_the_model_runs_on_openvino_and_answers_as_the_cpu_provider(
    openvino_server: RunningServer,
) -> None:
    np.testing.assert_allclose(
        infer(openvino_server, "cnn_openvino"), reference(openvino_server), atol=1e-4
    )
    assert (
        f"model 'cnn_openvino': ONNX Runtime runs it on {OPENVINO}, CPUExecutionProvider"
        in openvino_server.log()
    )


def test_an_accelerator_that_does_not_start_fails_the_load_with_its_reason(
    openvino_server: RunningServer,
) -> None:
    status, index = post(openvino_server, "/v2/repository/index", {})
    assert status == 200
    states = {entry["name"]: entry for entry in index}
    refused = states["cnn_refused"]
    assert refused["state"] == "UNAVAILABLE"
    assert f"ONNX Runtime did not start {OPENVINO}" in refused["reason"]
    assert states["cnn_openvino"]["state"] == "READY"
    status, answer = post(openvino_server, "/v2/models/cnn_refused/infer", {"inputs": []})
    assert status in (400, 503) and "cnn_refused" in answer["error"]


def test_declared_fallback_serves_without_the_accelerator(openvino_server: RunningServer) -> None:
    np.testing.assert_allclose(
        infer(openvino_server, "cnn_refused_fallback"), reference(openvino_server), atol=1e-4
    )
    assert (
        f"model 'cnn_refused_fallback': ONNX Runtime did not start {OPENVINO}"
        in openvino_server.log()
    )
    assert "running without it (execution_accelerator_fallback)" in openvino_server.log()
