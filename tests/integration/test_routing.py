"""Routes over a real server: weighted A/B split, sticky keys, shadow statistics, route
metadata, variants that degrade under load and say so in the response parameters."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server

ROUTING = """
routes:
  ab:
    targets:
      - {model: add_sub, version: 1, weight: 3}
      - {model: add_sub, version: 2, weight: 1}
    sticky: true
    shadow: {model: add_sub_next}
  tiered:
    variants:
      - {model: slow_primary, label: full}
      - {model: slow_fast, label: fast}
    degrade: {max_queue: 1}
"""


def build_repository(repo: Path) -> Path:
    for version in (1, 2):
        path = modelgen.add_sub(repo, version=version)
    config = modelgen.model_config(path, max_batch_size=8)
    write_config(repo / "add_sub", {**config, "version_policy": {"all": {}}})
    path = modelgen.add_sub(repo, name="add_sub_next")
    write_config(repo / "add_sub_next", modelgen.model_config(path, max_batch_size=8))
    path = modelgen.slow(repo, name="slow_primary", seconds=1.0)
    write_config(repo / "slow_primary", modelgen.model_config(path))
    path = modelgen.scale(repo, name="slow_fast", factor=1.0, dims=())  # the same signature
    write_config(repo / "slow_fast", modelgen.model_config(path))
    (repo / "routing.yaml").write_text(ROUTING)
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = build_repository(tmp_path_factory.mktemp("routing_repository"))
    running = start_server(
        repo,
        tmp_path_factory.mktemp("routing_server") / "server.log",
        env={"INFERPLEX_ROUTING_HEADER": "X-User"},
    )
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def url(server: RunningServer, path: str) -> str:
    return f"http://{server.http_url}{path}"


def add_sub_body(**parameters: Any) -> dict[str, Any]:
    data = list(range(16))
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": data},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": data},
        ],
        "parameters": parameters,
    }


def route_stats(http: requests.Session, server: RunningServer, name: str) -> dict[str, Any]:
    reply = http.get(url(server, f"/v2/routes/{name}/stats"))
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_split_follows_the_weights(http: requests.Session, server: RunningServer) -> None:
    before = [t["requests"] for t in route_stats(http, server, "ab")["targets"]]
    n = 400
    versions: Counter[str] = Counter()
    for _ in range(n):
        reply = http.post(url(server, "/v2/models/ab/infer"), json=add_sub_body())
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["model_name"] == "add_sub"
        assert answer["outputs"][0]["data"] == [2 * i for i in range(16)]
        versions[answer["model_version"]] += 1
    # version 2 has weight 1 of 4: within 5 sigma of the binomial mean
    assert abs(versions["2"] - n / 4) <= 5 * math.sqrt(n * 0.25 * 0.75), versions
    after = [t["requests"] for t in route_stats(http, server, "ab")["targets"]]
    assert [a - b for a, b in zip(after, before, strict=True)] == [versions["1"], versions["2"]]


def test_sticky_routing_key(http: requests.Session, server: RunningServer) -> None:
    seen: dict[str, set[str]] = {}
    for key in range(24):
        for _ in range(3):
            reply = http.post(
                url(server, "/v2/models/ab/infer"), json=add_sub_body(routing_key=f"user-{key}")
            )
            seen.setdefault(f"user-{key}", set()).add(reply.json()["model_version"])
    assert all(len(versions) == 1 for versions in seen.values()), seen
    assert set.union(*seen.values()) == {"1", "2"}


def test_sticky_http_header(http: requests.Session, server: RunningServer) -> None:
    def version(key: str, **parameters: Any) -> str:
        reply = http.post(
            url(server, "/v2/models/ab/infer"),
            json=add_sub_body(**parameters),
            headers={"x-user": key},
        )
        assert reply.status_code == 200, reply.text
        return reply.json()["model_version"]

    by_key = {f"u{i}": version(f"u{i}") for i in range(24)}
    assert all(version(key) == v for key, v in by_key.items())
    assert set(by_key.values()) == {"1", "2"}
    # the header stands for the routing_key parameter, which wins when both are given
    one = next(k for k, v in by_key.items() if v == "1")
    two = next(k for k, v in by_key.items() if v == "2")
    assert version(one, routing_key=two) == "2"


def test_shadow_latency_and_difference_are_recorded(
    http: requests.Session, server: RunningServer
) -> None:
    for _ in range(20):
        assert http.post(url(server, "/v2/models/ab/infer"), json=add_sub_body()).ok
    deadline = time.monotonic() + 30
    while True:  # the shadow answers after the client got its answer
        shadow = route_stats(http, server, "ab")["shadow"]
        if shadow["compared"] >= 20 or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert shadow["model"] == "add_sub_next" and shadow["errors"] == 0
    assert shadow["compared"] >= 20 and shadow["mirrored"] >= shadow["compared"]
    assert shadow["max_abs_diff"]["max"] == 0.0  # the same arithmetic
    assert shadow["cosine"]["min"] == pytest.approx(1.0)
    assert shadow["latency_ms"]["p99"] > 0 and shadow["primary_latency_ms"]["p50"] > 0


def test_route_metadata_ready_and_config(server: RunningServer, http: requests.Session) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        metadata = client.get_model_metadata("ab")
        assert metadata["name"] == "ab"
        assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
        assert client.is_model_ready("ab") and client.is_model_ready("tiered")
        assert client.get_model_config("ab")["name"] == "ab"
        # the statistics of a route are those of the models behind it
        stats = client.get_inference_statistics("ab")["model_stats"]
        assert {(s["name"], s["version"]) for s in stats} == {("add_sub", "1"), ("add_sub", "2")}
    finally:
        client.close()
    reply = http.post(url(server, "/v2/models/ab/versions/1/infer"), json=add_sub_body())
    assert reply.status_code == 404
    assert "'ab' is a route: it has no versions" in reply.json()["error"]
    listing = http.get(url(server, "/v2/routes")).json()
    assert [r["name"] for r in listing["routes"]] == ["ab", "tiered"] and not listing["error"]
    reply = http.get(url(server, "/v2/routes/nope/stats"))
    assert reply.status_code == 404 and "unknown route 'nope'" in reply.json()["error"]


def slow_body() -> dict[str, Any]:
    return {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}


def test_variants_degrade_under_load_and_name_the_variant(server: RunningServer) -> None:
    def call(_: int) -> dict[str, Any]:
        reply = requests.post(url(server, "/v2/models/tiered/infer"), json=slow_body())
        assert reply.status_code == 200, reply.text
        return reply.json()

    # the full model takes a second per request: while it runs one and queues one, the
    # others are answered by the fast variant
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(call, range(6)))
    variants = Counter(a["parameters"]["variant"] for a in answers)
    assert variants["full"] >= 1 and variants["fast"] >= 1, variants
    for answer in answers:
        expected = {"full": "slow_primary", "fast": "slow_fast"}[answer["parameters"]["variant"]]
        assert answer["model_name"] == expected
        assert answer["outputs"][0]["data"] == [1.0, 2.0]
    stats = requests.get(url(server, "/v2/routes/tiered/stats")).json()
    assert stats["degraded"] >= 1 and stats["last_degrade_reason"].startswith("queue ")


def test_variant_parameter_over_grpc(server: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        tensor = grpcclient.InferInput("INPUT0", [2], "FP32")
        tensor.set_data_from_numpy(np.array([3, 4], dtype=np.float32))
        result = client.infer("tiered", [tensor])
        variant = result.get_response().parameters["variant"].string_param
        assert variant in {"full", "fast"}
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [3, 4])
        assert client.get_model_metadata("tiered").name == "tiered"
        assert client.is_model_ready("tiered")
    finally:
        client.close()
