"""deploy/kserve: the ServingRuntime and the example InferenceServices parse, are valid
(tests/deploy/schemas.py), and fit together and with the server's flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

pytest.importorskip(
    "kubernetes_validate", reason="needs the deploy extra: pip install -e .[deploy]"
)

from inferplex.cli.main import serve
from tests.deploy.schemas import KUBERNETES_VERSIONS, validate

KSERVE = Path(__file__).resolve().parents[2] / "deploy" / "kserve"
FILES = ("servingruntime.yaml", "inferenceservice.yaml", "inferenceservice-grpc.yaml")


def load(name: str) -> dict[str, Any]:
    (obj,) = [doc for doc in yaml.safe_load_all((KSERVE / name).read_text()) if doc]
    return obj


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", FILES)
def test_valid(name: str, version: str) -> None:
    validate(load(name), version)


def test_runtime_is_a_v2_runtime_for_onnx() -> None:
    spec = load("servingruntime.yaml")["spec"]
    assert {"v2", "grpc-v2"} <= set(spec["protocolVersions"])
    assert [f["name"] for f in spec["supportedModelFormats"]] == ["onnx"]
    (main,) = spec["containers"]
    assert main["name"] == "kserve-container"  # the name KServe merges a model's spec into
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in main["args"])
    # KServe's conventions: the storage initializer's folder, REST 8080, gRPC 9000.
    assert flags["model-repository"] == "/mnt/models"
    assert (flags["http-port"], flags["grpc-port"]) == ("8080", "9000")
    assert main["ports"][0]["containerPort"] == 8080
    assert main["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    annotations = load("servingruntime.yaml")["metadata"]["annotations"]
    assert annotations["prometheus.kserve.io/port"] == flags["metrics-port"]


def test_runtime_arguments_are_server_flags() -> None:
    """`inferplex serve` accepts the runtime's arguments (checked with --help appended, so
    nothing starts)."""
    (main,) = load("servingruntime.yaml")["spec"]["containers"]
    assert main["command"] == ["inferplex", "serve"]
    result = CliRunner().invoke(serve, [*main["args"], "--help"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", FILES[1:])
def test_inference_services_use_the_runtime(name: str) -> None:
    runtime = load("servingruntime.yaml")
    model = load(name)["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {
        f["name"] for f in runtime["spec"]["supportedModelFormats"]
    }
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def test_grpc_service_asks_for_the_grpc_port() -> None:
    (main,) = load("servingruntime.yaml")["spec"]["containers"]
    grpc_port = int(dict(a.removeprefix("--").split("=", 1) for a in main["args"])["grpc-port"])
    model = load("inferenceservice-grpc.yaml")["spec"]["predictor"]["model"]
    assert model["ports"] == [{"name": "h2c", "containerPort": grpc_port, "protocol": "TCP"}]
