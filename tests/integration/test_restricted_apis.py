"""Triton's restricted APIs (--http-restricted-api, --grpc-restricted-protocol), enforced
as Triton enforces them: a restricted group's APIs answer only calls carrying its header
(on gRPC, the metadata key ``triton-grpc-protocol-<key>``) with its value; the others stay
open; the refusal says what Triton's does. Driven with tritonclient, as Triton's own
L0_http / L0_grpc restriction tests drive tritonserver, on both server twins."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from examples.modelgen import add_sub
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server
from tests.conftest import TWINS

#: tritonclient adds its own headers to the dict it is given: each call gets a copy
INFER = {"infer-key": "infer-value"}
ADMIN = {"admin-key": "admin-value"}
PREFIX = "triton-grpc-protocol-"


@pytest.fixture(scope="module", params=list(TWINS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    repository = tmp_path_factory.mktemp("restricted-repo")
    add_sub(repository)
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=("add_sub",),
        http_restricted_api=(
            "metadata,inference:infer-key=infer-value",
            "model-repository:admin-key=admin-value",
        ),
        grpc_restricted_protocol=(
            "health,inference:infer-key=infer-value",
            "model-repository:admin-key=admin-value",
        ),
        **TWINS[request.param],
    )
    with Server(config) as running:
        yield running


def _inputs(module: type) -> list:  # type: ignore[type-arg]
    data = np.ones((1, 16), np.float32)
    inputs = [module.InferInput(name, [1, 16], "FP32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


@pytest.fixture
def http(server: Server) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


@pytest.fixture
def grpc(server: Server) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.close()


def test_http_restricted_apis_need_their_header(http: httpclient.InferenceServerClient) -> None:
    client = http
    # APIs in no group stay open, with or without a group's header
    client.get_inference_statistics("add_sub")
    client.get_inference_statistics("add_sub", headers=dict(INFER))
    assert client.is_server_live()  # health is not restricted on HTTP here
    with pytest.raises(InferenceServerException, match="This API is restricted") as refused:
        client.get_server_metadata()
    assert refused.value.status() == "403"
    assert "expecting header 'infer-key'" in str(refused.value)
    assert client.get_server_metadata(headers=dict(INFER))["name"]
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.infer("add_sub", _inputs(httpclient), headers={"test": "1"})
    with pytest.raises(InferenceServerException, match="This API is restricted"):
        client.infer("add_sub", _inputs(httpclient), headers={"infer-key": "wrong"})
    result = client.infer("add_sub", _inputs(httpclient), headers=dict(INFER))
    assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
    # one group's header does not open another group's APIs
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.unload_model("add_sub", headers=dict(INFER))
    client.load_model("add_sub", headers=dict(ADMIN))


def test_grpc_restricted_protocols_need_their_metadata_key(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    client = grpc
    client.get_inference_statistics("add_sub")
    client.get_inference_statistics("add_sub", headers={PREFIX + "infer-key": "infer-value"})
    with pytest.raises(InferenceServerException, match="This protocol is restricted") as refused:
        client.is_server_live()
    assert "expecting header 'triton-grpc-protocol-infer-key'" in str(refused.value)
    # the HTTP spelling of the header is not the gRPC one
    with pytest.raises(InferenceServerException, match="This protocol is restricted"):
        client.is_server_live(headers=dict(INFER))
    assert client.is_server_live(headers={PREFIX + "infer-key": "infer-value"})
    with pytest.raises(InferenceServerException, match="This protocol is restricted"):
        client.infer("add_sub", _inputs(grpcclient), headers={"test": "1"})
    result = client.infer(
        "add_sub", _inputs(grpcclient), headers={PREFIX + "infer-key": "infer-value"}
    )
    assert result.as_numpy("OUTPUT1").tolist() == [[0.0] * 16]
    with pytest.raises(InferenceServerException, match="This protocol is restricted"):
        client.unload_model("add_sub", headers={PREFIX + "infer-key": "infer-value"})
    client.load_model("add_sub", headers={PREFIX + "admin-key": "admin-value"})
