"""deploy/k8s/overlays/mesh: renders with `kubectl kustomize`, every object is valid against
the Kubernetes schemas, and the mesh is wired: the ring's members are the StatefulSet's pod
names, the routers' nginx configuration (written by the init container's own command, run
here; the mesh-watch sidecar runs the same with --watch) addresses exactly those pods, an HPA
scales the StatefulSet within the members' reach, Services select the right pods, settings are
server settings."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip(
    "kubernetes_validate", reason="needs the deploy extra: pip install -e .[deploy]"
)

from inferplex.cli.main import main
from inferplex.config.server_config import ServerConfig
from inferplex.mesh.members import MemberSource
from inferplex.server import Server
from tests.deploy.schemas import KUBERNETES_VERSIONS, validate
from tests.deploy.test_k8s import K8S, Objects, one, render

KINDS = {"StatefulSet", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget",
         "PersistentVolumeClaim", "HorizontalPodAutoscaler"}  # fmt: skip


@pytest.fixture(scope="module")
def objects() -> Objects:
    return render(K8S / "overlays" / "mesh")


def named(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_is_valid(objects: Objects, version: str) -> None:
    assert {obj["kind"] for obj in objects} == KINDS
    for obj in objects:
        validate(obj, version)


def test_the_ring_is_the_statefulsets_pods(objects: Objects) -> None:
    """The members are read from DNS: the StatefulSet's pod names under its headless Service
    (which publishes pods not yet ready), up to at least the HPA's maximum."""
    replicas = one(objects, "StatefulSet")
    source = MemberSource(one(objects, "ConfigMap")["data"]["INFERPLEX_MESH_MEMBERS"])
    name = replicas["metadata"]["name"]
    service = replicas["spec"]["serviceName"]
    assert source.template == f"{name}-{{i}}.{service}"
    headless = named(objects, "Service", service)
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    hpa = one(objects, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name}
    assert hpa["minReplicas"] <= replicas["spec"]["replicas"] <= hpa["maxReplicas"] <= source.most
    (container,) = replicas["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["INFERPLEX_MESH_SELF"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["INFERPLEX_LOAD_ON_DEMAND"]["value"] == "true"
    fields = {f"INFERPLEX_{field.upper()}" for field in ServerConfig.model_fields}
    settings = {name for name in env if not name.startswith("MALLOC_")}  # glibc's tunables
    assert settings <= fields, settings - fields


def test_services_select_their_own_pods(objects: Objects) -> None:
    replica_pods = pod_labels(one(objects, "StatefulSet"))
    router_pods = pod_labels(one(objects, "Deployment"))
    headless = one(objects, "StatefulSet")["spec"]["serviceName"]
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"].items()
        mine, other = (
            (replica_pods, router_pods)
            if service["metadata"]["name"] == headless
            else (router_pods, replica_pods)
        )
        assert selector <= mine.items() and not selector <= other.items(), service
    budget = one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    assert budget.items() <= replica_pods.items()


def test_routers_nginx_addresses_every_replica(objects: Objects, tmp_path: Path) -> None:
    """Runs the init container's command (with a repository of two models) and checks the
    configuration it writes."""
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    config_map = one(objects, "ConfigMap")
    assert init["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
    for model in ("a", "b"):
        (tmp_path / model).mkdir()
    args = [
        arg.replace("/models", str(tmp_path)).replace("/etc/nginx-mesh", str(tmp_path))
        for arg in init["command"][1:]
    ]
    # the members as DNS would give them for the StatefulSet's pods, from a file here
    replicas = one(objects, "StatefulSet")
    pods = [f"{replicas['metadata']['name']}-{i}" for i in range(replicas["spec"]["replicas"])]
    (tmp_path / "members").write_text("\n".join(pods))
    env = {**config_map["data"], "INFERPLEX_MESH_MEMBERS": f"file:{tmp_path / 'members'}"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "nginx.conf").read_text()
    for pod in pods:
        assert f"server {pod}.inferplex-mesh:8000 resolve " in text
        assert f"server {pod}.inferplex-mesh:8001 resolve " in text
    nginx, watch = spec["containers"]
    assert spec["shareProcessNamespace"] is True
    assert watch["command"] == [*init["command"], *watch["command"][len(init["command"]) :]]
    assert "--watch" in watch["command"] and watch["envFrom"] == init["envFrom"]
    reload = next(a for a in watch["command"] if a.startswith("--reload-command="))
    pid = re.search(r"^pid (\S+);$", text, re.M)
    assert pid and pid.group(1) in reload
    mounts = {m["name"]: m["mountPath"] for m in nginx["volumeMounts"]}
    assert {m["name"]: m["mountPath"] for m in watch["volumeMounts"]}.items() >= mounts.items()
    ports = {p["name"]: p["containerPort"] for p in nginx["ports"]}
    assert "listen 0.0.0.0:8000;" in text and ports == {"http": 8000, "grpc": 8001}
    assert "/etc/nginx-mesh/nginx.conf" in nginx["args"][0]


def test_termination_grace_covers_the_drain(objects: Objects) -> None:
    spec = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (_, pause) = container["lifecycle"]["preStop"]["exec"]["command"]
    drain = inspect.signature(Server.stop).parameters["grace"].default
    assert spec["terminationGracePeriodSeconds"] >= int(pause) + drain
