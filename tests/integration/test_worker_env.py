"""A Python model's code does not see the server's secrets: a real ``inferplex serve`` started
with API tokens and a model key in its environment serves a model.py that reports what its
own environment holds, over HTTP and gRPC (with the inference token)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from inferplex_tools.benchtool.launch import RunningServer, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

TOKEN = "inference-token-xyz"
SECRETS = {
    "INFERPLEX_INFERENCE_TOKEN": TOKEN,
    "INFERPLEX_MANAGEMENT_TOKEN": "management-token-xyz",
    "INFERPLEX_MODEL_KEY": "5e" * 32,
    "AWS_SECRET_ACCESS_KEY": "aws-secret-xyz",
    "UNLISTED_SETTING": "unlisted",
}

#: answers with its whole environment as JSON
MODEL = """
import json, os
import numpy as np
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        text = json.dumps(dict(os.environ)).encode()
        return {"ENV": np.array([text], dtype=object)}
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "ENV" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("worker-env")
    model = root / "repository" / "env"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL)
    (model / "config.pbtxt").write_text(CONFIG)
    running = start_server(
        root / "repository",
        root / "server.log",
        env={
            **SECRETS,
            "PASSED_ON": "operator-asked",
            "INFERPLEX_WORKER_ENV": "PASSED_ON",
            "LC_ALL": "C.UTF-8",
        },
    )
    yield running
    assert running.stop() == 0, running.log()


def seen(environment: bytes) -> dict[str, str]:
    found: dict[str, str] = json.loads(environment)
    return found


def check(environment: dict[str, str]) -> None:
    leaked = {k for k, v in environment.items() if k in SECRETS or v in SECRETS.values()}
    assert not leaked, f"the model's code sees {sorted(leaked)}"
    assert not [k for k in environment if k.startswith("INFERPLEX_")]
    assert environment["PASSED_ON"] == "operator-asked"  # --worker-env PASSED_ON
    assert environment["LC_ALL"] == "C.UTF-8" and environment["PATH"]


def test_http_model_code_sees_no_secret(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        result = client.infer("env", [tensor], headers={"Authorization": f"Bearer {TOKEN}"})
        check(seen(result.as_numpy("ENV")[0]))
    finally:
        client.close()


def test_grpc_model_code_sees_no_secret(server: RunningServer) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        tensor = grpcclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        result = client.infer("env", [tensor], headers={"authorization": f"Bearer {TOKEN}"})
        check(seen(result.as_numpy("ENV")[0]))


def test_the_server_itself_still_has_its_tokens(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        with pytest.raises(InferenceServerException) as caught:
            client.infer("env", [tensor])  # the token is still required
        assert caught.value.status() == "401", caught.value
    finally:
        client.close()
