"""Security over real sockets: API tokens and scopes, a separate management listener, TLS and
mutual TLS, encrypted models, request limits. Servers run in-process on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from click.testing import CliRunner
from tritonclient.utils import InferenceServerException

from examples.modelgen import add_sub
from inferplex.cli.main import main as cli
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server
from tests.conftest import TWINS
from tests.support.certs import Certificates, make_certificates

INFERENCE = {"Authorization": "Bearer inference-token"}
MANAGEMENT = {"Authorization": "Bearer management-token"}
#: gRPC metadata keys are lower-case
GRPC_INFERENCE = {"authorization": "Bearer inference-token"}
GRPC_MANAGEMENT = {"authorization": "Bearer management-token"}


def serve(repository: Path, **settings: Any) -> Server:
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        **settings,
    )
    return Server(config).start_in_thread()


@pytest.fixture(scope="module", params=list(TWINS))
def twin(request: pytest.FixtureRequest) -> dict[str, str]:
    """The settings of the built-in HTTP and gRPC servers, then of their reference twins
    (tests/conftest.py): the tests that take it run against both."""
    return TWINS[request.param]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("secure-repo")
    add_sub(repo)
    return repo


def infer_body() -> dict[str, Any]:
    data = list(range(16))
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data},
        ]
    }


def grpc_inputs() -> list[grpcclient.InferInput]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        inputs.append(tensor)
    return inputs


# --- tokens and the management listener ----------------------------------------------------


@pytest.fixture(scope="module")
def guarded(repository: Path, twin: dict[str, str]) -> Iterator[Server]:
    server = serve(
        repository,
        inference_token="inference-token",
        management_token="management-token",
        management_port=0,
        **twin,
    )
    yield server
    server.stop_thread()


def test_health_needs_no_token(guarded: Server) -> None:
    base = f"http://127.0.0.1:{guarded.http_port}"
    assert requests.get(f"{base}/v2/health/ready", timeout=5).status_code == 200
    assert requests.get(f"{base}/v2/health/live", timeout=5).status_code == 200


def test_inference_without_or_with_a_wrong_token_is_401(guarded: Server) -> None:
    url = f"http://127.0.0.1:{guarded.http_port}/v2/models/add_sub/infer"
    missing = requests.post(url, json=infer_body(), timeout=5)
    assert missing.status_code == 401
    assert "Authorization: Bearer" in missing.json()["error"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = requests.post(
        url, json=infer_body(), headers={"Authorization": "Bearer nope"}, timeout=5
    )
    assert wrong.status_code == 401
    assert requests.get(url.removesuffix("/infer"), timeout=5).status_code == 401


def test_inference_with_either_token_works(guarded: Server) -> None:
    url = f"http://127.0.0.1:{guarded.http_port}/v2/models/add_sub/infer"
    for headers in (INFERENCE, MANAGEMENT):
        response = requests.post(url, json=infer_body(), headers=headers, timeout=5)
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["data"][3] == 6.0


def test_management_api_lives_on_its_own_port(guarded: Server) -> None:
    path = "/v2/repository/models/add_sub/unload"
    public = requests.post(
        f"http://127.0.0.1:{guarded.http_port}{path}", headers=MANAGEMENT, timeout=5
    )
    assert public.status_code == 403
    assert f"127.0.0.1:{guarded.management_port}" in public.json()["error"]
    management = f"http://127.0.0.1:{guarded.management_port}"
    inference_only = requests.post(f"{management}{path}", headers=INFERENCE, timeout=5)
    assert inference_only.status_code == 403
    assert "inference scope only" in inference_only.json()["error"]
    # inference endpoints are not served on the management port
    refused = requests.post(
        f"{management}/v2/models/add_sub/infer", json=infer_body(), headers=MANAGEMENT, timeout=5
    )
    assert refused.status_code == 403
    assert requests.get(f"{management}/v2/health/live", timeout=5).status_code == 200


def test_grpc_tokens(guarded: Server) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{guarded.grpc_port}")
    assert client.is_server_ready()  # health: open
    with pytest.raises(InferenceServerException) as missing:
        client.infer("add_sub", grpc_inputs())
    assert missing.value.status() == "StatusCode.UNAUTHENTICATED"
    result = client.infer("add_sub", grpc_inputs(), headers=GRPC_INFERENCE)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2.0))
    with pytest.raises(InferenceServerException) as elsewhere:
        client.load_model("add_sub", headers=GRPC_MANAGEMENT)
    assert elsewhere.value.status() == "StatusCode.PERMISSION_DENIED"
    assert str(guarded.management_port) in elsewhere.value.message()
    client.close()


def test_oversized_headers_are_431(repository: Path, twin: dict[str, str]) -> None:
    server = serve(repository, max_header_bytes=2048, **twin)
    try:
        url = f"http://127.0.0.1:{server.http_port}/v2/health/ready"
        assert requests.get(url, timeout=5).status_code == 200
        response = requests.get(url, headers={"X-Big": "x" * 4096}, timeout=5)
        assert response.status_code == 431
        assert "INFERPLEX_MAX_HEADER_BYTES" in response.json()["error"]
    finally:
        server.stop_thread()


def test_tensor_element_limit_is_413(repository: Path) -> None:
    server = serve(repository, max_tensor_elements=8)
    try:
        url = f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/infer"
        response = requests.post(url, json=infer_body(), timeout=5)
        assert response.status_code == 413
        assert "16 elements, above the limit of 8" in response.json()["error"]
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        with pytest.raises(InferenceServerException) as error:
            client.infer("add_sub", grpc_inputs())
        assert error.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        client.close()
    finally:
        server.stop_thread()


# --- TLS and mutual TLS ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_https_and_grpc_tls(repository: Path, certs: Certificates, twin: dict[str, str]) -> None:
    server = serve(
        repository, tls_cert_file=certs.server_cert, tls_key_file=certs.server_key, **twin
    )
    try:
        base = f"127.0.0.1:{server.http_port}"
        response = requests.post(
            f"https://{base}/v2/models/add_sub/infer", json=infer_body(), verify=certs.ca, timeout=5
        )
        assert response.status_code == 200
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://{base}/v2/health/ready", timeout=5)  # plain HTTP is refused
        client = grpcclient.InferenceServerClient(
            f"127.0.0.1:{server.grpc_port}", ssl=True, root_certificates=str(certs.ca)
        )
        assert client.infer("add_sub", grpc_inputs()).as_numpy("OUTPUT1").sum() == 0
        client.close()
    finally:
        server.stop_thread()


def test_mutual_tls_needs_a_client_certificate(
    repository: Path, certs: Certificates, twin: dict[str, str]
) -> None:
    server = serve(
        repository,
        tls_cert_file=certs.server_cert,
        tls_key_file=certs.server_key,
        tls_client_ca=certs.ca,
        **twin,
    )
    try:
        url = f"https://127.0.0.1:{server.http_port}/v2/health/ready"
        with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
            requests.get(url, verify=certs.ca, timeout=5)
        client_cert = (str(certs.client_cert), str(certs.client_key))
        assert requests.get(url, verify=certs.ca, cert=client_cert, timeout=5).status_code == 200
        target = f"127.0.0.1:{server.grpc_port}"
        anonymous = grpcclient.InferenceServerClient(
            target, ssl=True, root_certificates=str(certs.ca)
        )
        with pytest.raises(InferenceServerException):
            anonymous.is_server_live(client_timeout=5)
        anonymous.close()
        client = grpcclient.InferenceServerClient(
            target,
            ssl=True,
            root_certificates=str(certs.ca),
            private_key=str(certs.client_key),
            certificate_chain=str(certs.client_cert),
        )
        assert client.is_server_live()
        client.close()
    finally:
        server.stop_thread()


def test_half_a_tls_configuration_is_refused(repository: Path, certs: Certificates) -> None:
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        tls_cert_file=certs.server_cert,
    )
    with pytest.raises(Exception, match="both --tls-cert-file and --tls-key-file"):
        Server(config).start_in_thread()


# --- encrypted models --------------------------------------------------------------------------


def test_encrypted_model_serves_with_the_key_and_fails_clearly_without(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    model = add_sub(repo)
    plain = model.read_bytes()
    key_file = tmp_path / "model.key"
    runner = CliRunner()
    result = runner.invoke(cli, ["encrypt", str(model), "--key-file", str(key_file), "--new-key"])
    assert result.exit_code == 0, result.output
    assert model.read_bytes() != plain and plain not in model.read_bytes()
    assert key_file.stat().st_mode & 0o077 == 0  # the key file is private

    server = serve(repo, model_key_file=key_file)
    try:
        url = f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/infer"
        assert requests.post(url, json=infer_body(), timeout=5).status_code == 200
    finally:
        server.stop_thread()
    assert {p.name for p in model.parent.iterdir()} == {"model.onnx"}  # nothing plain written

    wrong = tmp_path / "wrong.key"
    wrong.write_text("11" * 32)
    server = serve(repo, model_key_file=wrong)
    try:
        index = requests.post(
            f"http://127.0.0.1:{server.http_port}/v2/repository/index", timeout=5
        ).json()
        (entry,) = [e for e in index if e["name"] == "add_sub"]
        assert entry["state"] == "UNAVAILABLE"
        assert "wrong model key" in entry["reason"]
    finally:
        server.stop_thread()
