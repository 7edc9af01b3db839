"""Triton's file overrides on the load API over real sockets, with Triton's own clients:
``load_model(name, config=..., files={"file:1/model.onnx": ...})`` over HTTP (base64) and
gRPC (bytes). The model loads from the given files only, beside the served versions; the
repository is never written; the temporary folder goes once the model is replaced or unloaded.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.engine.inference import InferenceEngine
from inferplex.lifecycle.file_override import FOLDER_PREFIX
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor
from inferplex_tools.benchtool.launch import RunningServer, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)


class Setup:
    """The server, its repository (``scale`` x2 in versions 1 and 2), the folder the server
    makes its temporary files in, and model files to send."""

    def __init__(self, root: Path) -> None:
        self.repository = root / "repository"
        self.tmp = root / "server-tmp"
        self.tmp.mkdir()
        self.sources = root / "sources"
        for version in (1, 2):
            modelgen.scale(self.repository, "scale", version, factor=2.0)
        path = self.repository / "scale" / "1" / "model.onnx"
        self.config = modelgen.model_config(path, max_batch_size=8)
        write_config(self.repository / "scale", self.config)
        self.server: RunningServer | None = None

    def model_file(self, factor: float) -> bytes:
        """The bytes of a ``scale`` model multiplying by ``factor``."""
        return modelgen.scale(self.sources / str(factor), "scale", 1, factor=factor).read_bytes()

    def override_folders(self) -> list[Path]:
        """The override folders the server holds now (each with the one model inside)."""
        return sorted(p for p in self.tmp.iterdir() if p.name.startswith(FOLDER_PREFIX))

    def repository_files(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.repository)): p.read_bytes()
            for p in sorted(self.repository.rglob("*"))
            if p.is_file()
        }

    @property
    def running(self) -> RunningServer:
        assert self.server is not None
        return self.server


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    made = Setup(tmp_path_factory.mktemp("override"))
    made.server = start_server(
        made.repository,
        made.tmp.parent / "server.log",
        env={"INFERPLEX_MODEL_CONTROL_MODE": "explicit", "TMPDIR": str(made.tmp)},
    )
    yield made
    assert made.server.stop() == 0, made.server.log()
    assert made.override_folders() == [], "override folders left after shutdown"


def factor_http(client: Any, version: str = "") -> float:
    """What the served ``scale`` multiplies by (over HTTP)."""
    tensor = httpclient.InferInput("INPUT0", list(X.shape), "FP32")
    tensor.set_data_from_numpy(X)
    result = client.infer("scale", [tensor], model_version=version)
    return float(result.as_numpy("OUTPUT0")[0, 0])


def test_http_override_loads_from_the_given_files_only(setup: Setup) -> None:
    before = setup.repository_files()
    client = httpclient.InferenceServerClient(setup.running.http_url)
    try:
        client.load_model("scale")
        assert factor_http(client) == 2.0
        assert client.is_model_ready("scale", "2")
        config = json.dumps(setup.config)
        client.load_model("scale", config=config, files={"file:1/model.onnx": setup.model_file(3)})
        # Triton's semantics: the folder is the override alone; repository version 2 is gone
        assert factor_http(client) == 3.0 and factor_http(client, "1") == 3.0
        assert not client.is_model_ready("scale", "2")
        assert client.get_model_metadata("scale")["versions"] == ["1"]
        [folder] = setup.override_folders()
        inside = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        assert inside == ["scale/1/model.onnx"]
        # a second override replaces the first; the first folder goes once it is drained
        client.load_model("scale", config=config, files={"file:1/model.onnx": setup.model_file(4)})
        assert factor_http(client) == 4.0
        assert setup.override_folders() != [folder] and len(setup.override_folders()) == 1
        # a load without files goes back to the repository and drops the override folder
        client.load_model("scale")
        assert factor_http(client) == 2.0 and client.is_model_ready("scale", "2")
        assert setup.override_folders() == []
        assert setup.repository_files() == before  # the repository was never written
    finally:
        client.close()


def test_grpc_override_of_a_model_not_in_the_repository(setup: Setup) -> None:
    with grpcclient.InferenceServerClient(setup.running.grpc_url) as client:
        # Triton's smallest override config: the rest is read from the model file
        files = {"file:1/model.onnx": setup.model_file(5)}
        client.load_model("fresh", config='{"backend": "onnxruntime"}', files=files)
        assert client.is_model_ready("fresh", "1")
        tensor = grpcclient.InferInput("INPUT0", list(X.shape), "FP32")
        tensor.set_data_from_numpy(X)
        result = client.infer("fresh", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X * 5)
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["fresh"].state == "READY"
        assert len(setup.override_folders()) == 1
        client.unload_model("fresh")
        assert setup.override_folders() == []
        assert index_state(client, "fresh") == ("UNAVAILABLE", "unloaded")
        with pytest.raises(InferenceServerException) as caught:  # its files went with it
            client.load_model("fresh")
        assert str(caught.value.status()) == "StatusCode.NOT_FOUND"


def index_state(client: Any, name: str) -> tuple[str, str]:
    rows = {m.name: m for m in client.get_model_repository_index().models}
    return rows[name].state, rows[name].reason


def load_http(setup: Setup, parameters: dict[str, Any]) -> requests.Response:
    return requests.post(
        f"http://{setup.running.http_url}/v2/repository/models/scale/load",
        data=json.dumps({"parameters": parameters}),
        timeout=30,
    )


GOOD = base64.b64encode(b"onnx").decode()


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"file:1/model.onnx": GOOD}, "load parameter 'config' is required with file overrides"),
        ({"config": "{}", "file:../model.onnx": GOOD}, "'file:../model.onnx': the path must"),
        ({"config": "{}", "file:/tmp/model.onnx": GOOD}, "not absolute"),
        ({"config": "{}", "file:0/model.onnx": GOOD}, "version folder '0' must be a positive"),
        ({"config": "{}", "file:1/model.onnx": "%%%"}, "'file:1/model.onnx' is not valid base64"),
        ({"config": "{}", "file:1/model.onnx": 7}, "must hold the file's content"),
    ],
)
def test_http_bad_overrides_are_400(
    setup: Setup, parameters: dict[str, Any], fragment: str
) -> None:
    response = load_http(setup, parameters)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]
    assert setup.override_folders() == []


def test_grpc_bad_overrides_are_invalid_argument(setup: Setup) -> None:
    config = json.dumps(setup.config)
    with grpcclient.InferenceServerClient(setup.running.grpc_url) as client:
        for config_given, files, fragment in [
            (None, {"file:1/model.onnx": b"x"}, "'config' is required with file overrides"),
            (config, {"file:1/../../etc/x": b"x"}, "must stay inside the model folder"),
            (config, {"file:one/model.onnx": b"x"}, "version folder 'one' must be a positive"),
        ]:
            with pytest.raises(InferenceServerException) as caught:
                client.load_model("scale", config=config_given, files=files)
            assert str(caught.value.status()) == "StatusCode.INVALID_ARGUMENT"
            assert fragment in caught.value.message()
    assert setup.override_folders() == []


def test_a_broken_override_leaves_the_served_versions_serving(setup: Setup) -> None:
    client = httpclient.InferenceServerClient(setup.running.http_url)
    try:
        client.load_model("scale")
        files = {"file:1/model.onnx": b"not an onnx model"}
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("scale", config=json.dumps(setup.config), files=files)
        assert "load failed for model 'scale'" in caught.value.message()
        assert factor_http(client) == 2.0 and client.is_model_ready("scale", "2")
        assert setup.override_folders() == []  # the failed load's folder is gone
    finally:
        client.close()


def test_requests_keep_being_answered_across_override_swaps(setup: Setup) -> None:
    client = httpclient.InferenceServerClient(setup.running.http_url)
    client.load_model("scale")
    seen: set[float] = set()
    errors: list[BaseException] = []
    stop = threading.Event()

    def send() -> None:  # its own client: tritonclient's HTTP client is not thread-safe
        sender = httpclient.InferenceServerClient(setup.running.http_url)
        try:
            while not stop.is_set():
                seen.add(factor_http(sender))
        except BaseException as exc:
            errors.append(exc)
        finally:
            sender.close()

    thread = threading.Thread(target=send)
    thread.start()
    try:
        config = json.dumps(setup.config)
        for factor in (3, 5, 3):
            client.load_model(
                "scale", config=config, files={"file:1/model.onnx": setup.model_file(factor)}
            )
        client.load_model("scale")
    finally:
        stop.set()
        thread.join(30)
        client.close()
    assert errors == []
    assert seen <= {2.0, 3.0, 5.0}
    assert setup.override_folders() == []


async def factor(engine: InferenceEngine, model: str) -> float:
    request = InferenceRequest(model, [Tensor("INPUT0", "FP32", X.shape, X)])
    return float((await engine.infer(request)).outputs[0].data[0, 0])


async def test_poll_mode_keeps_overrides_until_the_repository_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = Setup(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(setup.tmp))
    config = ServerConfig(
        model_repository=setup.repository,
        model_control_mode="poll",
        repository_poll_secs=3600,  # the test polls itself
    )
    engine = build_engine(config)
    await engine.start()
    try:
        poller = engine.lifecycle.poller
        assert poller is not None
        scale_config = json.dumps(setup.config)
        for name, times, model_config in [
            ("scale", 3, scale_config),
            ("fresh", 5, '{"backend": "onnxruntime"}'),
        ]:
            files = {"file:1/model.onnx": setup.model_file(times)}
            await engine.load_model(name, {"config": model_config, **files})
        await poller.poll_once()  # nothing changed on disk: both overrides stay
        assert await factor(engine, "scale") == 3.0 and await factor(engine, "fresh") == 5.0
        assert len(setup.override_folders()) == 2
        # the repository's scale changes: poll reloads it from there
        path = modelgen.scale(setup.repository, "scale", 2, factor=7.0)
        later = time.time_ns() + 1_000_000_000
        os.utime(path, ns=(later, later))
        await poller.poll_once()
        assert await factor(engine, "scale") == 7.0 and await factor(engine, "fresh") == 5.0
        assert len(setup.override_folders()) == 1
    finally:
        await engine.stop()
    assert setup.override_folders() == []
