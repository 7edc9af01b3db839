"""The remote backend against a second, real inferplex server on loopback: forwarding over
the binary protocol, the remote's errors, timeouts, and the local fallback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from examples import modelgen
from inferplex import InferenceRequest, InferenceResponse, ServerConfig, Tensor
from inferplex.backends.base import InstanceSpec
from inferplex.backends.remote import RemoteBackend, RemoteUnavailableError
from inferplex.config.readers import config_from_dict
from inferplex.config.writers import write_config
from inferplex.errors import ConfigError, DeadlineExceededError, InvalidInputError
from inferplex.server import build_engine
from inferplex_tools.benchtool.launch import HOST, RunningServer, free_port, start_server

#: seconds the remote "slow" model takes per call; timeout_s in the tests is well below it
SLOW_SECONDS = 0.5


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The "cloud" server: tenfold (x10, FP32 [-1, -1]), slow, and identity_bytes."""
    repo = tmp_path_factory.mktemp("remote")
    path = modelgen.scale(repo, "tenfold", factor=10.0)
    write_config(repo / "tenfold", modelgen.model_config(path, max_batch_size=8))
    path = modelgen.identity(repo, "BYTES")
    write_config(path.parent.parent, modelgen.model_config(path, max_batch_size=8))
    path = modelgen.slow(repo, seconds=SLOW_SECONDS)
    write_config(repo / "slow", modelgen.model_config(path))
    running = start_server(repo, tmp_path_factory.mktemp("remote-log") / "server.log")
    yield running
    assert running.stop() == 0, running.log()


def remote_config(
    url: str,
    parameters: dict[str, str],
    datatype: str = "FP32",
    max_batch_size: int = 8,
    dims: list[int] | None = None,
) -> dict[str, Any]:
    dims = dims if dims is not None else [-1]
    return {
        "backend": "remote",
        "max_batch_size": max_batch_size,
        "input": [{"name": "INPUT0", "data_type": datatype, "dims": dims}],
        "output": [{"name": "OUTPUT0", "data_type": datatype, "dims": dims}],
        "parameters": {"url": url, **parameters},
    }


_opened: list[RemoteBackend] = []


def backend(url: str, parameters: dict[str, str], **kwargs: Any) -> RemoteBackend:
    config = config_from_dict(remote_config(url, parameters, **kwargs), "edge", "edge/config")
    made = RemoteBackend(Path("."), config, InstanceSpec())
    _opened.append(made)
    return made


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    """Each test's backends close their connections (an open socket left is a warning)."""
    yield
    while _opened:
        _opened.pop().close()


def closed_url() -> str:
    """An address where nothing listens: a remote that is down."""
    return f"http://{HOST}:{free_port()}"


def test_forwards_over_one_kept_connection(remote: RunningServer) -> None:
    edge = backend(f"http://{remote.http_url}", {"remote_model": "tenfold"})
    for rows in (1, 3):
        x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
        out = edge.execute({"INPUT0": x}, ["OUTPUT0"])
        np.testing.assert_array_equal(out["OUTPUT0"], x * 10)
    first = edge._connection
    edge.execute({"INPUT0": np.ones((1, 2), dtype=np.float32)}, ["OUTPUT0"])
    assert edge._connection is first is not None


def test_bytes_tensors(remote: RunningServer) -> None:
    edge = backend(
        remote.http_url, {"remote_model": "identity_bytes", "remote_version": "1"}, datatype="BYTES"
    )
    data = np.array([[b"abc", b"", "é".encode()]], dtype=np.object_)
    out = edge.execute({"INPUT0": data}, ["OUTPUT0"])
    assert out["OUTPUT0"].tolist() == data.tolist()


def test_the_remotes_errors(remote: RunningServer) -> None:
    edge = backend(f"http://{remote.http_url}", {"remote_model": "tenfold"})
    with pytest.raises(
        InvalidInputError, match=r"remote model 'tenfold' at http://.* answered 400"
    ):
        edge.execute({"INPUT0": np.ones((9, 2), dtype=np.float32)}, ["OUTPUT0"])  # > 8 rows
    unknown = backend(f"http://{remote.http_url}", {"remote_model": "nope"})
    with pytest.raises(
        RemoteUnavailableError, match="answered 404: Request for unknown model: 'nope' is not found"
    ):
        unknown.execute({"INPUT0": np.ones((1, 2), dtype=np.float32)}, ["OUTPUT0"])


def test_down_and_timeout_without_fallback(remote: RunningServer) -> None:
    down = backend(closed_url(), {})
    with pytest.raises(RemoteUnavailableError, match=r"remote model 'edge' at .* is unreachable"):
        down.execute({"INPUT0": np.ones((1, 2), dtype=np.float32)}, ["OUTPUT0"])
    slow = backend(
        remote.http_url,
        {"remote_model": "slow", "timeout_s": "0.1"},
        max_batch_size=0,
        dims=[-1],
    )
    with pytest.raises(DeadlineExceededError, match=r"did not answer within 0\.1 s \(timeout_s\)"):
        slow.execute({"INPUT0": np.ones(3, dtype=np.float32)}, ["OUTPUT0"])


def test_the_switch_to_the_fallback_and_back_are_both_logged(
    remote: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    class Local:
        def infer(self, request: InferenceRequest, timeout: float | None = None) -> Any:
            (tensor,) = request.inputs
            return InferenceResponse(
                request.model_name, "1", [Tensor("OUTPUT0", "FP32", tensor.shape, tensor.data * 2)]
            )

    parameters = {"remote_model": "tenfold", "fallback_model": "double", "retry_after_s": "0.01"}
    config = config_from_dict(remote_config(closed_url(), parameters), "edge", "edge/config")
    edge = RemoteBackend(Path("."), config, InstanceSpec(caller=Local()))
    _opened.append(edge)
    x = np.ones((1, 2), dtype=np.float32)
    with caplog.at_level(logging.WARNING, logger="inferplex.backends.remote"):
        assert edge.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"].tolist() == [[2.0, 2.0]]
        edge._host, edge._port = remote.http_url.split(":")[0], int(remote.http_url.split(":")[1])
        time.sleep(0.02)  # past retry_after_s: the remote is tried again
        assert edge.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"].tolist() == [[10.0, 10.0]]
        edge.execute({"INPUT0": x}, ["OUTPUT0"])  # still the remote: nothing more to say
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert "answering from fallback model 'double'" in messages[0]
    assert "answers again; fallback model 'double' no longer used" in messages[1]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"url": ""}, "parameter url must be the remote server's address"),
        ({"url": "https://cloud:443"}, "parameter url must be .*got 'https://cloud:443'"),
        ({"url": "http://h:1", "timeout_s": "soon"}, "parameter timeout_s must be a positive"),
        ({"url": "http://h:1", "retry_after_s": "0"}, "parameter retry_after_s must be a posit"),
        ({"url": "http://h:1", "fallback_model": "local"}, "a fallback_model needs the engine"),
    ],
)
def test_config_errors(parameters: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        backend(parameters.pop("url"), parameters)


def write_remote_model(repo: Path, name: str, config: dict[str, Any]) -> None:
    (repo / name / "1").mkdir(parents=True)
    write_config(repo / name, config, "yaml")


async def test_fallback_answers_when_the_remote_is_down_or_slow(
    remote: RunningServer, tmp_path: Path
) -> None:
    """The "edge" server: remote models with a local fallback (x2, or x0.5 for 1-D data)."""
    path = modelgen.scale(tmp_path, "double", factor=2.0)
    write_config(tmp_path / "double", modelgen.model_config(path, max_batch_size=8))
    path = modelgen.scale(tmp_path, "half", factor=0.5, dims=())
    write_config(tmp_path / "half", modelgen.model_config(path))
    url = f"http://{remote.http_url}"
    fallback = {"fallback_model": "double", "retry_after_s": "60"}
    write_remote_model(
        tmp_path, "cloud", remote_config(url, {"remote_model": "tenfold", **fallback})
    )
    write_remote_model(tmp_path, "cloud_down", remote_config(closed_url(), fallback))
    slow = {"remote_model": "slow", "timeout_s": "0.1", "fallback_model": "half"}
    write_remote_model(tmp_path, "cloud_slow", remote_config(url, slow, max_batch_size=0))
    engine = build_engine(ServerConfig(model_repository=tmp_path))
    await engine.start()
    try:
        x = np.array([[1.0, 2.0]], dtype=np.float32)

        async def answer(model: str, data: np.ndarray) -> np.ndarray:
            request = InferenceRequest(model, [Tensor("INPUT0", "FP32", data.shape, data)])
            response = await asyncio.wait_for(engine.infer(request), 30)
            return response.outputs[0].data

        np.testing.assert_array_equal(await answer("cloud", x), x * 10)
        for _ in range(2):  # the second goes straight to the fallback (retry_after_s)
            np.testing.assert_array_equal(await answer("cloud_down", x), x * 2)
        one_d = np.array([4.0, 8.0], dtype=np.float32)
        np.testing.assert_array_equal(await answer("cloud_slow", one_d), one_d * 0.5)
        (stats,) = engine.model_statistics("double")
        assert stats["inference_stats"]["success"]["count"] == 2
    finally:
        await engine.stop()
