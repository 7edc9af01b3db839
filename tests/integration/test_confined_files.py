"""Files a model's config names, and model names, over real sockets (HTTP and gRPC, Triton's
clients) against a real ``inferplex serve`` in explicit mode.

A config may come from a client (the load API's ``config`` parameter): the files it names
stay inside the model's folder, or the load is a 400 / INVALID_ARGUMENT that names the field
and the rule, says the same whether the outside file exists or not, and changes nothing (no
outside model.py runs, the served version goes on serving). A model name no folder can have
(300 characters, a '/', a NUL) is a 400 naming the rule, not a 500.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.array([[1.0, 2.0]], dtype=np.float32)

#: a handler outside the repository: importing it leaves a marker file
EVIL = """
import pathlib
pathlib.Path({marker!r}).write_text("ran")
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        return {{"OUTPUT0": data["INPUT0"]}}
"""

BENIGN = """
from inferplex.handler import BaseHandler

class Handler(BaseHandler):
    def inference(self, data):
        return {"OUTPUT0": data["INPUT0"] * 10}
"""

PYTHON_CONFIG: dict[str, Any] = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1, 2]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1, 2]}],
}


class Setup:
    """A repository with ``scale`` (x2), ``linked`` (its model file a link to a model outside
    the repository) and ``shared`` (version 1's file a link to version 2's); outside it, a
    real model and a model.py that marks that it ran."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repository = root / "repository"
        self.outside = root / "outside"
        self.outside.mkdir()
        model = modelgen.scale(self.repository, "scale", 1, factor=2.0)
        self.config = modelgen.model_config(model, max_batch_size=8)
        write_config(self.repository / "scale", self.config)
        # a real ONNX model outside the repository, and links to it
        self.outside_model = modelgen.scale(self.outside, "other", 1, factor=7.0)
        linked = self.repository / "linked" / "1"
        linked.mkdir(parents=True)
        (linked / "model.onnx").symlink_to(self.outside_model)
        modelgen.scale(self.repository, "shared", 2, factor=3.0)
        (self.repository / "shared" / "1").mkdir()
        (self.repository / "shared" / "1" / "model.onnx").symlink_to("../2/model.onnx")
        self.marker = root / "evil-ran"
        self.evil = self.outside / "evil.py"
        self.evil.write_text(EVIL.format(marker=str(self.marker)))
        self.server: RunningServer | None = None

    @property
    def running(self) -> RunningServer:
        assert self.server is not None
        return self.server

    def load_http(self, name: str, parameters: dict[str, Any]) -> requests.Response:
        return requests.post(
            f"http://{self.running.http_url}/v2/repository/models/{name}/load",
            data=json.dumps({"parameters": parameters}),
            timeout=60,
        )

    def config_with(self, **changes: Any) -> str:
        return json.dumps({**self.config, **changes})


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    made = Setup(tmp_path_factory.mktemp("confined"))
    made.server = start_server(
        made.repository, made.root / "server.log", env={"INFERPLEX_MODEL_CONTROL_MODE": "explicit"}
    )
    yield made
    assert made.server.stop() == 0, made.server.log()


def factor(setup: Setup) -> float:
    client = httpclient.InferenceServerClient(setup.running.http_url)
    try:
        tensor = httpclient.InferInput("INPUT0", list(X.shape), "FP32")
        tensor.set_data_from_numpy(X)
        return float(client.infer("scale", [tensor]).as_numpy("OUTPUT0")[0, 0])
    finally:
        client.close()


def error_of(response: requests.Response) -> str:
    assert response.status_code == 400, (response.status_code, response.text)
    message: str = response.json()["error"]
    return message


def test_a_model_file_outside_the_version_folder_is_400_and_says_nothing_of_it(
    setup: Setup,
) -> None:
    assert setup.load_http("scale", {}).status_code == 200
    assert factor(setup) == 2.0
    answers = {}
    for name in [
        str(setup.outside_model),  # a real model outside the repository
        str(setup.outside / "missing.onnx"),  # nothing there
        "/etc/shadow",  # "Protobuf parsing failed" told it exists
        "/etc/no-such-file",
    ]:
        message = error_of(setup.load_http("scale", {"config": setup.config_with(
            default_model_filename=name)}))  # fmt: skip
        assert "default_model_filename" in message
        assert "must be relative to the version folder, not absolute" in message
        assert "Protobuf" not in message and "not found" not in message
        answers[name] = message.replace(name, "NAME")
    assert len(set(answers.values())) == 1, answers  # the same answer, existing or not
    for name in ["../../../outside/other/1/model.onnx", "../2/model.onnx", "1/../../x.onnx"]:
        message = error_of(setup.load_http("scale", {"config": setup.config_with(
            default_model_filename=name)}))  # fmt: skip
        assert "must stay inside the version folder (no '..'" in message
    assert factor(setup) == 2.0  # nothing changed: the served version goes on serving


def test_a_handler_outside_the_override_folder_never_runs(setup: Setup) -> None:
    config = json.dumps({**PYTHON_CONFIG, "default_model_filename": str(setup.evil)})
    benign = base64.b64encode(BENIGN.encode()).decode()
    message = error_of(setup.load_http("py", {"config": config, "file:1/model.py": benign}))
    assert "default_model_filename" in message and "not absolute" in message
    with grpcclient.InferenceServerClient(setup.running.grpc_url) as client:
        relative = json.dumps({**PYTHON_CONFIG, "default_model_filename": "../../../evil.py"})
        for given in (config, relative):
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("py", config=given, files={"file:1/model.py": BENIGN.encode()})
            assert str(caught.value.status()) == "StatusCode.INVALID_ARGUMENT"
            assert "default_model_filename" in caught.value.message()
    assert not setup.marker.exists(), "a model.py outside the model's folder ran"


def test_warmup_and_label_files_stay_inside_the_model_folder(setup: Setup) -> None:
    sample = {"data_type": "TYPE_FP32", "dims": [2], "input_data_file": "../../../../etc/passwd"}
    warmup = [{"batch_size": 1, "inputs": {"INPUT0": sample}}]
    message = error_of(setup.load_http("scale", {"config": setup.config_with(model_warmup=warmup)}))
    assert "input_data_file" in message and "must stay inside the model's warmup/ folder" in message
    outputs = [{**setup.config["output"][0], "label_filename": "/etc/passwd"}]
    message = error_of(setup.load_http("scale", {"config": setup.config_with(output=outputs)}))
    assert "output[0].label_filename" in message and "not absolute" in message


def test_a_link_out_of_the_model_folder_is_refused_and_one_inside_is_followed(
    setup: Setup,
) -> None:
    message = error_of(setup.load_http("linked", {}))
    assert "default_model_filename 'model.onnx' must stay inside linked/1/" in message
    assert str(setup.outside) not in message  # where the link leads is not told
    every = json.dumps({"platform": "onnxruntime_onnx", "version_policy": {"all": {}}})
    response = setup.load_http("shared", {"config": every})  # 1/model.onnx -> ../2/model.onnx
    assert response.status_code == 200, response.text
    client = httpclient.InferenceServerClient(setup.running.http_url)
    try:
        assert client.is_model_ready("shared", "1") and client.is_model_ready("shared", "2")
    finally:
        client.close()


LONG = "m" * 300


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        (LONG, "at most 255 bytes in UTF-8 (the file system's limit for a folder name), got 300"),
        ("é" * 200, "at most 255 bytes in UTF-8"),  # 200 characters, 400 bytes
    ],
)
def test_http_model_names_no_folder_can_have_are_400(
    setup: Setup, name: str, fragment: str
) -> None:
    # (control characters, '..' and encoded slashes in a path are the router's to refuse)
    base = f"http://{setup.running.http_url}/v2/repository/models/{name}"
    for action, parameters in [
        ("load", {}),
        ("load", {"config": "{}", "file:1/model.onnx": base64.b64encode(b"x").decode()}),
        ("unload", {}),
    ]:
        response = requests.post(
            f"{base}/{action}", data=json.dumps({"parameters": parameters}), timeout=30
        )
        assert response.status_code == 400, (action, response.status_code, response.text)
        assert fragment in response.json()["error"]


def test_grpc_model_names_no_folder_can_have_are_invalid_argument(setup: Setup) -> None:
    with grpcclient.InferenceServerClient(setup.running.grpc_url) as client:
        for name, fragment in [
            (LONG, "at most 255 bytes"),
            ("a/b", "may not hold '/'"),
            ("a\0b", "control characters"),
            ("..", "may not be '.' or '..'"),
        ]:
            overrides: dict[str, bytes] = {"file:1/model.onnx": b"x"}
            for action, files in [("load", None), ("load", overrides), ("unload", None)]:
                with pytest.raises(InferenceServerException) as caught:
                    if action == "unload":
                        client.unload_model(name)
                    elif files is None:
                        client.load_model(name)
                    else:
                        client.load_model(name, config="{}", files=files)
                assert str(caught.value.status()) == "StatusCode.INVALID_ARGUMENT", caught.value
                assert fragment in caught.value.message()


def test_override_file_names_stay_inside_the_models_folder(setup: Setup) -> None:
    content = base64.b64encode(b"x").decode()
    for key, fragment in [
        ("file:1/" + "f" * 300, "at most 255 bytes in UTF-8 per file or folder name"),
        ("file:1/a\\..\\..\\x", "backslashes"),
        ("file:1/./model.onnx", "must stay inside the model folder"),
    ]:
        message = error_of(setup.load_http("scale", {"config": "{}", key: content}))
        assert re.search(re.escape(fragment), message), message
    assert factor(setup) == 2.0
