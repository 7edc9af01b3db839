"""The JSON bodies of the management endpoints are capped small (issue 30): a body above
``--max-small-request-bytes`` (index, unload, instances, shared memory), a load's config
above ``--max-load-config-bytes``, or a load above ``--max-load-request-bytes`` (with its
file overrides) is a 413 naming the setting, on the built-in HTTP server and its uvicorn
twin; bodies within the caps are served (a large one is parsed off the loop)."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import HOST, RunningServer, start_server

#: the caps the server runs with here: small, so that the bodies are small too
MANAGEMENT_CAP = 32 * 1024
LOAD_CAP = 256 * 1024


@pytest.fixture(scope="module", params=["builtin", "uvicorn"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp(f"management_json_{request.param}")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path))
    running = start_server(
        repo,
        repo.parent / f"{request.param}.log",
        env={
            "INFERPLEX_MAX_SMALL_REQUEST_BYTES": str(MANAGEMENT_CAP),
            "INFERPLEX_MAX_LOAD_CONFIG_BYTES": str(MANAGEMENT_CAP),
            "INFERPLEX_MAX_LOAD_REQUEST_BYTES": str(LOAD_CAP),
        },
        args=["--http-server", request.param, "--model-control-mode", "explicit"],
    )
    yield running
    running.stop()


def post(server: RunningServer, path: str, body: bytes, chunked: bool = False) -> tuple[int, str]:
    """One POST over a raw socket: a server that refuses early may close before the whole
    body is sent, and its answer is read all the same."""
    if chunked:
        framing = b"Transfer-Encoding: chunked\r\n"
        pieces = [body[i : i + 8192] for i in range(0, len(body), 8192)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    else:
        framing = b"Content-Length: %d\r\n" % len(body)
        payload = body
    head = b"POST %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n%s\r\n" % (
        path.encode(),
        framing,
    )
    with socket.create_connection((HOST, server.http_port), timeout=60) as sock:
        # refused before the body was read, the server may close first: its answer waits
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head + payload)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read().decode()


def padded(document: dict[str, object], size: int) -> bytes:
    """``document`` as JSON of ``size`` bytes (spaces after it: still one valid object)."""
    text = json.dumps(document).encode()
    return text + b" " * (size - len(text))


@pytest.mark.parametrize(
    "path",
    [
        "/v2/repository/index",
        "/v2/repository/models/add_sub/unload",
        "/v2/repository/models/add_sub/instances",
        "/v2/systemsharedmemory/region/r/register",
    ],
)
def test_management_json_over_its_cap_is_a_413_naming_the_setting(
    server: RunningServer, path: str
) -> None:
    for chunked in (False, True):
        status, text = post(server, path, padded({}, 4 * MANAGEMENT_CAP), chunked)
        assert status == 413, text
        assert "--max-small-request-bytes" in text


def test_bodies_within_the_cap_are_served(server: RunningServer) -> None:
    # large enough to be parsed in a worker thread, within the cap
    status, text = post(server, "/v2/repository/index", padded({"ready": False}, MANAGEMENT_CAP))
    assert status == 200, text
    assert any(model["name"] == "add_sub" for model in json.loads(text))


def test_load_has_its_own_cap(server: RunningServer) -> None:
    config = json.dumps({"name": "add_sub", "backend": "onnxruntime"})
    files = {"file:1/other.bin": base64.b64encode(bytes(LOAD_CAP)).decode()}
    body = json.dumps({"parameters": {"config": config, **files}}).encode()
    status, text = post(server, "/v2/repository/models/add_sub/load", body)
    assert status == 413, text
    assert "--max-load-request-bytes" in text
    # above the management cap, within the load cap: read, then refused for its config
    huge = json.dumps({"name": "add_sub", "parameters": {"p": {"string_value": "x" * 40000}}})
    body = json.dumps({"parameters": {"config": huge}}).encode()
    assert MANAGEMENT_CAP < len(body) < LOAD_CAP
    status, text = post(server, "/v2/repository/models/add_sub/load", body)
    assert status == 413, text
    assert "load parameter 'config'" in text and "--max-load-config-bytes" in text
    # many small values within the load's cap: refused before they are parsed
    body = json.dumps({"parameters": {"x": [1] * (LOAD_CAP // 4)}}).encode()
    assert MANAGEMENT_CAP < len(body) < LOAD_CAP
    status, text = post(server, "/v2/repository/models/add_sub/load", body)
    assert status == 413, text
    assert "JSON values" in text and "--max-load-config-bytes" in text
    # a load within both caps
    status, text = post(server, "/v2/repository/models/add_sub/load", b"")
    assert status == 200, text


def test_a_load_with_files_above_the_management_cap_is_served(
    server: RunningServer, tmp_path: Path
) -> None:
    model = modelgen.add_sub(tmp_path)
    config = json.dumps({**modelgen.model_config(model), "name": "from_files"})
    files = {
        "file:1/model.onnx": base64.b64encode(model.read_bytes()).decode(),
        "file:1/padding.bin": base64.b64encode(bytes(4 * MANAGEMENT_CAP)).decode(),
    }
    body = json.dumps({"parameters": {"config": config, **files}}).encode()
    assert MANAGEMENT_CAP < len(body) < LOAD_CAP
    status, text = post(server, "/v2/repository/models/from_files/load", body)
    assert status == 200, text
