"""deploy/k8s: every overlay renders with `kubectl kustomize`, every object it renders is
valid against the Kubernetes schemas, and the objects are wired to each other and to the
server (ports, labels, health routes, settings, metrics)."""

from __future__ import annotations

import functools
import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

pytest.importorskip(
    "kubernetes_validate", reason="needs the deploy extra: pip install -e .[deploy]"
)

from inferplex.config.server_config import ServerConfig
from inferplex.server import Server
from inferplex_tools.benchtool.launch import RunningServer
from tests.deploy.schemas import KUBERNETES_VERSIONS, validate

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
OVERLAYS = ("base", "overlays/cpu", "overlays/gpu")
KINDS = {
    "Deployment",
    "Service",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "ServiceMonitor",
    "PersistentVolumeClaim",
}

Objects = list[dict[str, Any]]

#: The overlay deploy/k8s/README.md tells users to write for models from S3.
S3_OVERLAY = """
resources: [{up}/overlays/cpu]
components: [{up}/components/s3-models]
patches:
  - target: {{kind: ConfigMap, name: inferplex-s3}}
    patch: |-
      - {{op: replace, path: /data/MODELS_URI, value: "s3://your-bucket/models"}}
      - {{op: replace, path: /data/AWS_DEFAULT_REGION, value: eu-west-1}}
"""


def render(directory: Path) -> Objects:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (it renders Kustomize offline: `kubectl kustomize`)")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}:\n{result.stderr}"
    return [obj for obj in yaml.safe_load_all(result.stdout) if obj]


@functools.cache
def rendered(overlay: str) -> Objects:
    return render(K8S / overlay)


def one(objects: Objects, kind: str) -> dict[str, Any]:
    (found,) = [obj for obj in objects if obj["kind"] == kind]
    return found


def container(objects: Objects) -> dict[str, Any]:
    (found,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return found


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_is_valid(overlay: str, version: str) -> None:
    objects = rendered(overlay)
    assert {obj["kind"] for obj in objects} == KINDS
    for obj in objects:
        validate(obj, version)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_objects_are_wired_together(overlay: str) -> None:
    objects = rendered(overlay)
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    service = one(objects, "Service")

    def selects_pods(selector: dict[str, str]) -> bool:
        return bool(selector) and selector.items() <= pod_labels.items()

    assert selects_pods(deployment["spec"]["selector"]["matchLabels"])
    assert selects_pods(service["spec"]["selector"])
    assert selects_pods(one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    monitor = one(objects, "ServiceMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    service_ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert [e["port"] for e in monitor["endpoints"]] == ["metrics"]
    assert all(e["path"] == "/metrics" for e in monitor["endpoints"])

    ports = {port["name"]: port["containerPort"] for port in container(objects)["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}  # the server's defaults
    assert {name: port["targetPort"] for name, port in service_ports.items()} == {
        name: name for name in ports
    }
    assert one(objects, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    claims = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "PersistentVolumeClaim"}
    volumes = pod["spec"]["volumes"]
    claimed = {
        v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v
    }
    assert claimed == claims
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    assert mounts["models"] == "/models"  # the image's --model-repository


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_the_v2_health_routes(overlay: str) -> None:
    main = container(rendered(overlay))
    for probe, path in (
        ("startupProbe", "/v2/health/ready"),
        ("readinessProbe", "/v2/health/ready"),
        ("livenessProbe", "/v2/health/live"),
    ):
        assert main[probe]["httpGet"] == {"path": path, "port": "http"}, probe


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_settings_are_server_settings(overlay: str) -> None:
    """Every INFERPLEX_* variable names a ServerConfig field (a typo would be ignored by
    nothing: the server refuses unknown settings, so it would not start)."""
    names = [env["name"] for env in container(rendered(overlay))["env"]]
    assert names and all(name.startswith("INFERPLEX_") for name in names)
    fields = {f"INFERPLEX_{field.upper()}" for field in ServerConfig.model_fields}
    assert set(names) <= fields, set(names) - fields


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_the_drain(overlay: str) -> None:
    spec = one(rendered(overlay), "Deployment")["spec"]["template"]["spec"]
    (_, pause) = container(rendered(overlay))["lifecycle"]["preStop"]["exec"]["command"]
    drain = inspect.signature(Server.stop).parameters["grace"].default
    assert spec["terminationGracePeriodSeconds"] >= int(pause) + drain


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_as_the_images_user(overlay: str) -> None:
    security = one(rendered(overlay), "Deployment")["spec"]["template"]["spec"]["securityContext"]
    dockerfile = (K8S.parent / "docker" / "Dockerfile.cpu").read_text()
    assert security["runAsNonRoot"] is True
    assert f"USER {security['runAsUser']}:{security['runAsGroup']}" in dockerfile


def test_gpu_overlay_asks_for_a_gpu_on_gpu_nodes() -> None:
    objects = rendered("overlays/gpu")
    main = container(objects)
    assert main["image"] == "inferplex:gpu"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_cpu_overlay_asks_for_no_gpu() -> None:
    main = container(rendered("overlays/cpu"))
    assert main["image"] == "inferplex:cpu"
    assert "nvidia.com/gpu" not in main["resources"]["limits"]


def test_s3_component_replaces_the_volume_claim(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    # kustomize accepts only relative paths to other kustomizations.
    up = os.path.relpath(K8S, overlay)
    (overlay / "kustomization.yaml").write_text(S3_OVERLAY.format(up=up))
    objects = render(overlay)
    for obj in objects:
        validate(obj, KUBERNETES_VERSIONS[-1])
    assert "PersistentVolumeClaim" not in {obj["kind"] for obj in objects}
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    (fetch,) = spec["initContainers"]
    assert {"name": "models", "mountPath": "/models"} in fetch["volumeMounts"]
    (models,) = [v for v in spec["volumes"] if v["name"] == "models"]
    assert set(models) == {"name", "emptyDir"}
    config_map = one(objects, "ConfigMap")
    assert config_map["data"]["MODELS_URI"] == "s3://your-bucket/models"
    assert fetch["envFrom"][0]["configMapRef"]["name"] == config_map["metadata"]["name"]


def test_autoscaling_metric_comes_from_the_server(server: RunningServer) -> None:
    """The HPA's custom metric is one the adapter rules publish, and every series those
    rules read is one a running server exports."""
    rules = yaml.safe_load((K8S / "prometheus-adapter" / "rules.yaml").read_text())["rules"]
    published = {rule["name"]["as"] for rule in rules["custom"]}
    hpa = one(rendered("base"), "HorizontalPodAutoscaler")
    wanted = {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"}
    assert wanted and wanted <= published
    exported = requests.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    families = {line.split()[2] for line in exported.splitlines() if line.startswith("# TYPE")}
    for rule in rules["custom"]:
        read = re.findall(
            r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{<<\.LabelMatchers>>\}", rule["metricsQuery"]
        )
        read.append(rule["seriesQuery"].split("{")[0])
        assert set(read) <= families, f"{rule['name']['as']} reads {set(read) - families}"
