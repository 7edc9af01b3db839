"""Three replicas behind nginx: rolling restarts under HTTP and gRPC load.

Each replica in turn gets SIGTERM while requests are in flight (one sent to it directly, and
whatever nginx routed to it): readiness must go false, the in-flight requests must be
answered, the process must exit 0; a new replica then starts on the same ports and nginx
must send it traffic again before the next one is stopped. Meanwhile closed-loop clients
send HTTP and gRPC requests through nginx and check every answer.

Two procedures (deploy/nginx/README.md explains them):
- SIGTERM alone: nginx learns from failed attempts (passive health) and retries them on
  another replica. Not one HTTP request may fail. A gRPC call that reaches a replica in the
  milliseconds around its SIGTERM can fail in one known way that nginx cannot retry (a
  gRPC body is streamed, never buffered); the test tolerates exactly that as an xfail.
- Drained at nginx first (the replica marked `down` and nginx reloaded, which is what
  Kubernetes does by removing a pod's endpoint): not one request of either kind may fail.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.cluster import Nginx, start_nginx, start_replica
from inferplex_tools.benchtool.launch import RunningServer
from tests.deploy.load import Failure, Load

pytestmark = pytest.mark.scale_out

REPLICAS = 3
#: Long enough that a request sent just before SIGTERM is still executing when it lands.
SLOW_SECONDS = 0.5
#: One ONNX Runtime thread per replica: three replicas share the machine's cores.
REPLICA_ENV = {"INFERPLEX_INTRA_OP_THREADS": "1"}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("scale_out_repository")
    path = modelgen.add_sub(repo)
    config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
    write_config(repo / "add_sub", config)
    path = modelgen.slow(repo, seconds=SLOW_SECONDS)
    write_config(repo / "slow", modelgen.model_config(path, max_batch_size=8))
    return repo


@pytest.fixture(scope="module")
def cluster(
    nginx: str, repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[RunningServer], Nginx]]:
    """Three replicas and nginx; a test that restarts a replica puts the new one in the list."""
    tmp_path = tmp_path_factory.mktemp("scale_out")
    replicas: list[RunningServer] = []
    balancer: Nginx | None = None
    try:
        for index in range(REPLICAS):
            log = tmp_path / f"replica{index}.log"
            replicas.append(start_replica(repository, log, env=REPLICA_ENV))
        balancer = start_nginx(tmp_path / "nginx", replicas)
        yield replicas, balancer
    finally:
        if balancer is not None:
            assert balancer.stop() == 0, balancer.error_log()
        for replica in replicas:
            assert replica.stop() == 0, replica.log()


def test_rolling_restart_with_passive_health_checks(
    cluster: tuple[list[RunningServer], Nginx], repository: Path
) -> None:
    load, sigterms = _rolling_restart(cluster, repository, drain_first=False)
    assert load.resent == 0, "nginx closed a client connection without answering"
    http = [f for f in load.failures if f.kind.startswith("http")]
    assert not http, f"{len(http)} HTTP request(s) failed: {http[:10]}"
    known = [f for f in load.failures if _grpc_shutdown_race(f, sigterms)]
    unexpected = [f for f in load.failures if f not in known]
    offsets = [[round(f.at - t, 3) for t in sigterms] for f in unexpected[:10]]
    assert not unexpected, (
        f"{len(unexpected)} failed: {unexpected[:10]}; seconds after each SIGTERM: {offsets}"
    )
    if known:
        pytest.xfail(f"{len(known)} gRPC call(s) failed at a replica's SIGTERM: {known}")


def test_rolling_restart_drained_at_nginx_first(
    cluster: tuple[list[RunningServer], Nginx], repository: Path
) -> None:
    load, _ = _rolling_restart(cluster, repository, drain_first=True)
    assert not load.failures, f"{len(load.failures)} failed: {load.failures[:10]}"


def _rolling_restart(
    cluster: tuple[list[RunningServer], Nginx], repository: Path, drain_first: bool
) -> tuple[Load, list[float]]:
    """Restart every replica in turn under load; returns the load and the SIGTERM times."""
    replicas, balancer = cluster
    load = Load(balancer.http_url, balancer.grpc_url, slow=True)
    sigterms: list[float] = []
    log_start = len(balancer.error_log())
    load.start()
    try:
        load.wait_for(50)
        for index, old in enumerate(replicas):
            if drain_first:
                balancer.reload(replicas, down={index})
            sigterms.append(_stop_with_request_in_flight(old))
            ports = (old.http_port, old.grpc_port, old.metrics_port)
            replicas[index] = start_replica(repository, old.log_path, ports=ports, env=REPLICA_ENV)
            if drain_first:
                balancer.reload(replicas)
            _wait_served(replicas[index], deadline=30.0)
        load.wait_for(50)
    finally:
        load.stop()
    retried = _retries(balancer, log_start)
    print(
        f"\nthrough nginx: {dict(load.ok)}; attempts nginx retried: {retried}; "
        f"sent again after nginx closed a kept-alive connection: {load.resent}"
    )
    assert set(load.ok) == set(load.kinds), f"some kind of request never succeeded: {load.ok}"
    return load, sigterms


def _stop_with_request_in_flight(replica: RunningServer) -> float:
    """SIGTERM while a request to the slow model runs; checks the drain; returns when the
    signal was sent."""
    in_flight = _DirectSlowRequest(replica)
    sigterm_at = time.monotonic()
    replica.process.send_signal(signal.SIGTERM)
    assert _not_ready_within(replica, 10.0), f"{replica.http_url} still ready after SIGTERM"
    assert replica.process.wait(60) == 0, replica.log()
    in_flight.join()
    assert in_flight.status == 200, f"the in-flight request failed: {in_flight}"
    assert in_flight.finished_at > sigterm_at, "the direct request was not in flight"
    return sigterm_at


def _grpc_shutdown_race(failure: Failure, sigterms: list[float]) -> bool:
    """The way a gRPC call can fail at a replica's SIGTERM: UNAVAILABLE with HTTP 502, when
    the replica's connection to nginx closed just as nginx sent a call on it (nginx cannot
    resend a call whose body it has streamed). The server's two-step GOAWAY makes this rare.
    """
    race = failure.grpc_code == "UNAVAILABLE" and "502" in failure.error
    return race and any(0 <= failure.at - t < 1.0 for t in sigterms)


class _DirectSlowRequest(threading.Thread):
    """One request to the slow model sent straight to a replica, left in flight."""

    def __init__(self, replica: RunningServer) -> None:
        super().__init__(daemon=True)
        self.url = f"http://{replica.http_url}/v2/models/slow/infer"
        self.status: int | str = "not answered"
        self.finished_at = 0.0
        self.start()
        # The replica reads the request within milliseconds and then runs the model for
        # SLOW_SECONDS; SIGTERM is sent in between. `finished_at` proves it afterwards.
        time.sleep(SLOW_SECONDS / 3)

    def run(self) -> None:
        tensor = {"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [7]}
        body: dict[str, Any] = {"inputs": [tensor]}
        try:
            response = requests.post(self.url, json=body, timeout=60)
            self.status = response.status_code
            if response.status_code == 200:
                assert response.json()["outputs"][0]["data"] == [7.0]
        except (requests.RequestException, AssertionError) as error:
            self.status = repr(error)
        self.finished_at = time.monotonic()

    def __repr__(self) -> str:
        return f"<{self.url}: {self.status}>"


def _not_ready_within(replica: RunningServer, deadline: float) -> bool:
    """True once /v2/health/ready stops answering 200: 503 while the replica drains, or a
    refused connection once it has closed its listening socket."""
    url = f"http://{replica.http_url}/v2/health/ready"
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1):
                pass
        except urllib.error.HTTPError as error:
            return error.code == 503
        except (urllib.error.URLError, ConnectionError):
            return True
        time.sleep(0.01)
    return False


def _wait_served(replica: RunningServer, deadline: float) -> None:
    """Wait until nginx routes requests to a (re)started replica again."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        # Ready comes from the HTTP port, which opens before the metrics port does.
        with contextlib.suppress(requests.ConnectionError):
            if _successes(replica) >= 5:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nginx sent no traffic to {replica.http_url} within {deadline}s")


def _successes(replica: RunningServer) -> float:
    text = requests.get(f"http://{replica.metrics_url}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "nv_inference_request_success"
        for sample in family.samples
    )


def _retries(balancer: Nginx, log_start: int) -> int:
    """How often nginx logged an upstream failure since ``log_start`` (characters of its
    error log): each one an attempt it repeated on another replica."""
    return balancer.error_log()[log_start:].count("[error]")


def test_answers_match_on_every_replica(cluster: tuple[list[RunningServer], Nginx]) -> None:
    """Round-robin reaches every replica, and all give the same answer."""
    replicas, balancer = cluster
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    body: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": a.ravel().tolist()},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
        ]
    }
    before = [_successes(r) for r in replicas]
    with requests.Session() as session:
        for _ in range(3 * REPLICAS):
            answer = session.post(
                f"http://{balancer.http_url}/v2/models/add_sub/infer", json=body, timeout=10
            )
            assert answer.status_code == 200, answer.text
            outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
            assert outputs["OUTPUT0"] == (a + 1).ravel().tolist()
    after = [_successes(r) for r in replicas]
    assert all(b > a for a, b in zip(before, after, strict=True)), (before, after)
