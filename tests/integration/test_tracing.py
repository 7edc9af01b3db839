"""OpenTelemetry spans per request, exported to the SDK's in-memory exporter."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import write_config
from inferplex.server import Server
from inferplex.tracing.context import TRACING

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
BODY = {
    "id": "req-42",
    "inputs": [
        {"name": name, "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}
        for name in ("INPUT0", "INPUT1")
    ],
}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("tracing-repo")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    return repo


def config(repository: Path, rate: float) -> ServerConfig:
    return ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        enable_metrics=False,
        trace_rate=rate,
    )


@pytest.fixture(scope="module")
def traced(repository: Path) -> Iterator[tuple[Server, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    with Server(config(repository, 1.0), span_exporter=exporter) as server:
        yield server, exporter
    assert not TRACING.enabled  # stopping the server switches tracing off


def spans_of(exporter: InMemorySpanExporter, trace_id: int, count: int) -> list[ReadableSpan]:
    """The spans of one trace, once ``count`` of them were exported (the server span ends
    after the response went out, so poll)."""
    deadline = time.monotonic() + 10
    while True:
        found = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def post(server: Server, body: object, **headers: str) -> requests.Response:
    url = f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/infer"
    return requests.post(url, json=body, headers=headers, timeout=10)


def grpc_inputs() -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.float32))
    return inputs


def test_tracing_is_off_by_default(repository: Path) -> None:
    # first: the traced server below switches tracing on for the whole process
    with Server(config(repository, 0.0)) as server:
        assert not TRACING.enabled
        response = post(server, BODY, traceparent=f"00-{TRACE_ID}-{PARENT_ID}-01")
        assert response.status_code == 200
        assert "traceparent" not in response.headers


class _Collector(BaseHTTPRequestHandler):
    """A minimal OTLP/HTTP trace receiver: keeps the span names of every export."""

    names: list[str] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.names.extend(span.name for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_spans_go_to_an_otlp_http_endpoint(repository: Path) -> None:
    # before the traced server below, which switches tracing on for the whole process
    receiver = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_port}/v1/traces"
        settings = config(repository, 1.0).model_copy(update={"trace_endpoint": endpoint})
        with Server(settings) as server:
            assert post(server, BODY).status_code == 200
        # stopping the server flushed the batch exporter
        assert sorted(_Collector.names) == sorted(
            ["POST /v2/models/add_sub/infer", "receive", "queue", "execute", "response"]
        )
    finally:
        receiver.shutdown()
        receiver.server_close()


def test_a_request_gets_a_server_span_with_its_phases_in_the_callers_trace(
    traced: tuple[Server, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    response = post(server, BODY, traceparent=f"00-{TRACE_ID}-{PARENT_ID}-01")
    assert response.status_code == 200, response.text
    assert response.headers["traceparent"].startswith(f"00-{TRACE_ID}-")
    spans = spans_of(exporter, int(TRACE_ID, 16), 5)
    by_name = {span.name: span for span in spans}
    root = by_name["POST /v2/models/add_sub/infer"]
    assert root.kind is SpanKind.SERVER
    assert root.parent is not None and root.parent.span_id == int(PARENT_ID, 16)
    assert root.attributes is not None
    assert root.attributes["inferplex.request_id"] == "req-42"
    assert root.attributes["inferplex.model.name"] == "add_sub"
    assert root.attributes["http.response.status_code"] == 200
    assert response.headers["traceparent"] == f"00-{TRACE_ID}-{root.context.span_id:016x}-01"
    phases = ["receive", "queue", "execute", "response"]
    assert set(by_name) == {root.name, *phases}
    children = [by_name[name] for name in phases]
    for child in children:
        assert child.parent is not None and child.parent.span_id == root.context.span_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    # the phases follow each other
    for before, after in itertools.pairwise(children):
        assert before.end_time <= after.start_time
    execute = by_name["execute"].attributes
    assert execute is not None
    assert execute["inferplex.batch.rows"] == 1 and execute["inferplex.batch.requests"] == 1
    assert str(execute["inferplex.instance"]).startswith("add_sub/1")


def test_a_new_trace_starts_without_a_traceparent_and_bad_input_has_no_queue_span(
    traced: tuple[Server, InMemorySpanExporter],
) -> None:
    server, exporter = traced
    response = post(server, {"inputs": []})
    assert response.status_code == 400
    trace_id = int(response.headers["traceparent"].split("-")[1], 16)
    spans = spans_of(exporter, trace_id, 3)
    names = sorted(span.name for span in spans)
    assert names == ["POST /v2/models/add_sub/infer", "receive", "response"]
    (root,) = (s for s in spans if s.parent is None)
    assert root.attributes is not None
    assert root.attributes["http.response.status_code"] == 400


def test_an_unsampled_parent_is_followed(traced: tuple[Server, InMemorySpanExporter]) -> None:
    server, exporter = traced
    unsampled = "0af7651916cd43dd8448eb211c80319c"
    response = post(server, BODY, traceparent=f"00-{unsampled}-{PARENT_ID}-00")
    assert response.status_code == 200
    assert "traceparent" not in response.headers
    # a sampled request after it: once its spans are out, the first one's would be too
    sampled = post(server, BODY).headers["traceparent"].split("-")[1]
    assert len(spans_of(exporter, int(sampled, 16), 5)) == 5
    assert not [
        s for s in exporter.get_finished_spans() if s.context.trace_id == int(unsampled, 16)
    ]


def test_health_and_metadata_are_not_traced(traced: tuple[Server, InMemorySpanExporter]) -> None:
    server, exporter = traced
    exporter.clear()
    assert requests.get(f"http://127.0.0.1:{server.http_port}/v2", timeout=10).ok
    assert exporter.get_finished_spans() == ()


def test_grpc_model_infer_gets_the_same_spans(traced: tuple[Server, InMemorySpanExporter]) -> None:
    server, exporter = traced
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4737"
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    inputs = grpc_inputs()
    client.infer(
        "add_sub",
        inputs,
        request_id="g-1",
        headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"},
    )
    client.get_server_metadata()  # not traced
    client.close()
    spans = spans_of(exporter, int(trace_id, 16), 5)
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"ModelInfer", "receive", "queue", "execute", "response"}
    root = by_name["ModelInfer"]
    assert root.kind is SpanKind.SERVER
    assert root.parent is not None and root.parent.span_id == int(PARENT_ID, 16)
    assert root.attributes is not None
    assert root.attributes["inferplex.request_id"] == "g-1"
    assert root.attributes["inferplex.model.name"] == "add_sub"
    assert root.attributes["rpc.system"] == "grpc"


def test_a_stream_request_gets_its_span_in_the_callers_trace(
    traced: tuple[Server, InMemorySpanExporter],
) -> None:
    """ModelStreamInfer: a server span per request of the stream, with the same phases as
    ModelInfer's, in the trace its call's metadata names."""
    server, exporter = traced
    trace_id = "6bf92f3577b34da6a3ce929d0e0e4738"
    answered = threading.Event()
    errors: list[object] = []

    def callback(result: object, error: object) -> None:
        errors.append(error)
        answered.set()

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    inputs = grpc_inputs()
    client.start_stream(callback, headers={"traceparent": f"00-{trace_id}-{PARENT_ID}-01"})
    client.async_stream_infer("add_sub", inputs, request_id="s-1")
    assert answered.wait(10) and errors == [None]
    client.stop_stream()
    client.close()
    spans = spans_of(exporter, int(trace_id, 16), 5)
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"ModelStreamInfer", "receive", "queue", "execute", "response"}
    root = by_name["ModelStreamInfer"]
    assert root.kind is SpanKind.SERVER
    assert root.parent is not None and root.parent.span_id == int(PARENT_ID, 16)
    assert root.attributes is not None
    assert root.attributes["inferplex.request_id"] == "s-1"
    assert root.attributes["rpc.method"] == "ModelStreamInfer"
    assert root.attributes["rpc.grpc.status_code"] == 0


def test_generate_gets_a_span_too(traced: tuple[Server, InMemorySpanExporter]) -> None:
    server, exporter = traced
    url = f"http://127.0.0.1:{server.http_port}/v2/models/add_sub/generate"
    body = {"id": "gen-1", "INPUT0": [1.0] * 16, "INPUT1": [1.0] * 16}
    response = requests.post(url, json=body, timeout=10)
    assert response.status_code == 200, response.text
    trace_id = int(response.headers["traceparent"].split("-")[1], 16)
    (root,) = (s for s in spans_of(exporter, trace_id, 5) if s.parent is None)
    assert root.name == "POST /v2/models/add_sub/generate"
    assert root.attributes is not None
    assert root.attributes["inferplex.request_id"] == "gen-1"
    assert root.attributes["http.response.status_code"] == 200
