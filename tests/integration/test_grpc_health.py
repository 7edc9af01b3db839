"""gRPC's health checking and server reflection on the gRPC port, on the built-in server and
its grpc.aio twin, driven by grpcio's own health and reflection clients (issue 20 §4:
Kubernetes `grpc:` probes, grpc_health_probe, grpcurl without -proto)."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from inferplex_tools.benchtool.launch import RunningServer, start_server

health_pb2 = pytest.importorskip("grpc_health.v1.health_pb2")
health_pb2_grpc = pytest.importorskip("grpc_health.v1.health_pb2_grpc")
reflection_pb2 = pytest.importorskip("grpc_reflection.v1alpha.reflection_pb2")
reflection_pb2_grpc = pytest.importorskip("grpc_reflection.v1alpha.reflection_pb2_grpc")
from google.protobuf import descriptor_pb2, descriptor_pool  # noqa: E402
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # noqa: E402
    ProtoReflectionDescriptorDatabase,
)

httpclient = pytest.importorskip("tritonclient.http")

Status = health_pb2.HealthCheckResponse


@pytest.fixture
def channel(twin_server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(twin_server.grpc_url) as opened:
        yield opened


@pytest.mark.parametrize(
    ("service", "status"),
    [
        ("", Status.SERVING),  # the whole server: what a Kubernetes grpc probe asks
        ("inference.GRPCInferenceService", Status.SERVING),
        ("add_sub", Status.SERVING),  # a model's name: its readiness
        ("broken", Status.NOT_SERVING),  # failed to load
    ],
)
def test_check(channel: grpc.Channel, service: str, status: int) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    assert answer.status == status


def test_check_of_an_unknown_service_is_not_found(channel: grpc.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=10)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("service", "status"), [("", Status.SERVING), ("nope", 3)])
def test_watch_sends_the_status_at_once_and_stays_open(
    channel: grpc.Channel, service: str, status: int
) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    call = stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=30)
    first = next(call)
    assert first.status == status  # 3: SERVICE_UNKNOWN, for a name not known
    assert call.is_active()  # the stream stays open for the changes to come
    call.cancel()


def test_reflection_describes_the_services(channel: grpc.Channel) -> None:
    """What grpcurl does without -proto: list the services, then build each one's
    descriptors (and the files they import) from the server's answers."""
    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    assert {
        "inference.GRPCInferenceService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    } <= services
    pool = descriptor_pool.DescriptorPool(database)
    inference = pool.FindServiceByName("inference.GRPCInferenceService")
    assert {"ModelInfer", "ModelConfig", "ModelStreamInfer"} <= set(inference.methods_by_name)
    config = pool.FindMessageTypeByName("inference.ModelConfig")  # from the imported file
    assert "dynamic_batching" in config.fields_by_name
    check = pool.FindMethodByName("grpc.health.v1.Health.Check")
    assert check.input_type.full_name == "grpc.health.v1.HealthCheckRequest"


def test_reflection_answers_each_request_on_one_open_stream(channel: grpc.Channel) -> None:
    """grpcurl's way: one stream, each request sent only once the previous one is answered
    (the client does not end its side in between)."""
    requests: queue.Queue[Any] = queue.Queue()

    def sent() -> Iterator[Any]:
        while (request := requests.get(timeout=30)) is not None:
            yield request

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = stub.ServerReflectionInfo(sent(), timeout=30)
    requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
    listed = next(answers).list_services_response.service
    assert "inference.GRPCInferenceService" in {s.name for s in listed}
    requests.put(
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="inference.ModelInferRequest")
    )
    files = next(answers).file_descriptor_response.file_descriptor_proto
    names = [descriptor_pb2.FileDescriptorProto.FromString(f).name for f in files]
    assert names == ["grpc_service.proto", "model_config.proto"]  # the file, then its import
    requests.put(reflection_pb2.ServerReflectionRequest(file_by_filename="no/such.proto"))
    assert next(answers).error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    requests.put(None)
    assert list(answers) == []


@pytest.fixture(scope="module")
def explicit_server(
    test_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """The test repository in explicit control mode: nothing loaded at start."""
    log_path = tmp_path_factory.mktemp("explicit") / "server.log"
    running = start_server(test_repository, log_path, args=["--model-control-mode", "explicit"])
    yield running
    assert running.stop() == 0, running.log()


def test_watch_sends_each_change(explicit_server: RunningServer) -> None:
    """A model's Watch stream follows it through a load and an unload, on one stream."""
    admin = httpclient.InferenceServerClient(explicit_server.http_url)
    with grpc.insecure_channel(explicit_server.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        call = stub.Watch(health_pb2.HealthCheckRequest(service="add_sub"), timeout=60)
        try:
            assert next(call).status == Status.NOT_SERVING  # known, not loaded
            admin.load_model("add_sub")
            assert next(call).status == Status.SERVING
            admin.unload_model("add_sub")
            assert next(call).status == Status.NOT_SERVING
        finally:
            call.cancel()
            admin.close()
