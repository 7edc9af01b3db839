"""A model mesh on loopback (docs/mesh.md): three replicas with --mesh-replicas behind a real
nginx configured by the same ring, 30 add_sub copies.

- the models each replica loaded at start are the ones nginx's map sends it;
- through nginx every model answers over HTTP and gRPC (the inferplex-model header), each
  on its owner only;
- a replica killed: each of its models is answered through nginx by its next owner, which
  loads it on demand.

bench/mesh.py measures the same at scale (300 models, memory limits, rolling restarts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from bench.mesh_cluster import (
    MeshCluster,
    MeshLoad,
    add_sub_workload,
    build_models,
    loaded_models,
)
from examples import modelgen
from inferplex_tools.benchtool.cluster import nginx_binary

MODELS = 30
#: a model with two owners (its config's mesh_copies)
HOT = "model_007"

pytestmark = pytest.mark.skipif(
    nginx_binary() is None, reason="nginx is not installed (scripts/system_packages.sh)"
)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MeshCluster]:
    folder = tmp_path_factory.mktemp("mesh")
    repo = folder / "models"
    build_models(repo, MODELS, lambda r, name: modelgen.add_sub(r, name))
    (repo / HOT / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nparameters { key: "mesh_copies" value { string_value: "2" } }\n'
    )
    cluster = MeshCluster(repo, folder)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _routed(conf: str) -> dict[str, set[str]]:
    """model -> the replicas nginx sends it to (the map, then the servers of its upstream
    that are not backups), from nginx's configuration file."""
    sets = dict(re.findall(r'^        "(.+)" (s\d+);$', conf, re.M))
    upstreams = dict(re.findall(r"upstream http_(s\d+) \{[^\n]*\n(.*?)\n    \}", conf, re.S))
    primaries = {
        set_id: set(re.findall(r"server (\S+) max_fails=1 fail_timeout=1s;", body))
        for set_id, body in upstreams.items()
    }
    return {model: primaries[set_id] for model, set_id in sets.items()}


def test_replicas_loaded_what_nginx_sends_them(mesh: MeshCluster) -> None:
    assert mesh.nginx is not None
    routed = _routed((mesh.nginx.prefix / "nginx.conf").read_text())
    assert len(routed) == MODELS
    assert len(routed[HOT]) == 2
    for name, replica in mesh.replicas.items():
        mine = {model for model, addresses in routed.items() if replica.http_url in addresses}
        assert mine, f"{name} owns nothing"
        assert loaded_models(replica) == mine, name


def test_every_model_answers_through_nginx_on_its_owner(mesh: MeshCluster) -> None:
    assert mesh.nginx is not None
    names = sorted(p.name for p in mesh.repository.iterdir())
    with MeshLoad(mesh.nginx, names, add_sub_workload(), http_clients=2, grpc_clients=2) as load:
        load.wait_for(4 * MODELS)
    assert not load.failures, load.failures[:5]
    assert set(load.answered) == set(names)
    assert set(load.ok) == {"http", "grpc"}
    owners = mesh.owners()
    for name, replica in mesh.replicas.items():
        served = _successes(replica.metrics_url)
        assert served and all(name in owners[model] for model in served), (name, served)
        # least_conn spreads the model with two owners over both
        assert (HOT in served) == (name in owners[HOT]), (name, served)


def test_a_killed_replicas_models_answer_from_their_next_owner(mesh: MeshCluster) -> None:
    assert mesh.nginx is not None
    owners = mesh.owners()
    victim = mesh.replicas.pop("r1")  # the fixture stops the others
    victim.process.kill()
    victim.process.wait()
    orphans = sorted(model for model, members in owners.items() if members == ("r1",))
    workload = add_sub_workload()
    body = {
        "inputs": [
            {"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
            for name, x in workload.inputs.items()
        ]
    }
    with requests.Session() as session:
        for model in orphans:
            url = f"http://{mesh.nginx.http_url}/v2/models/{model}/infer"
            answer = session.post(url, json=body, timeout=30)
            assert answer.status_code == 200, (model, answer.text)
            outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
            assert outputs["OUTPUT0"] == workload.expected["OUTPUT0"].ravel().tolist()
    for backup in {mesh.backup(model) for model in orphans}:
        taken = {model for model in orphans if mesh.backup(model) == backup}
        assert taken <= loaded_models(mesh.replicas[backup]), backup


def _successes(metrics_url: str) -> set[str]:
    """The models a replica answered at least once (nv_inference_request_success)."""
    text = requests.get(f"http://{metrics_url}/metrics", timeout=10).text
    return {
        sample.labels["model"]
        for family in text_string_to_metric_families(text)
        if family.name == "nv_inference_request_success"
        for sample in family.samples
        if sample.value > 0
    }
