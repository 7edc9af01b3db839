"""The OpenAI-compatible API gets what ``/infer`` and ``/generate`` get, each model request
being one call through the data plane (issues 32 and 33): the routing header (``--routing-header``)
picks a sticky route's target, each model request has its tracing span in the caller's trace,
and a large body is read off the event loop; on the built-in HTTP server and uvicorn."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from examples.modelgen.embedder import sentence_encoder
from examples.modelgen.llm import mock_llm
from inferplex.config.server_config import ServerConfig
from inferplex.server import Server
from inferplex.tracing.context import TRACING

TRACE_ID = "7bf92f3577b34da6a3ce929d0e0e4739"
PARENT_ID = "00f067aa0ba902b7"
HELLO = [{"role": "user", "content": "hello world the cat"}]

ROUTING = """
routes:
  sticky_llm:
    targets:
      - {model: llm_a, weight: 1}
      - {model: llm_b, weight: 1}
    sticky: true
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("openai_dataplane")
    for name in ("llm_a", "llm_b"):
        mock_llm(repo, name, instances=1, context_length=10**6)
    sentence_encoder(repo)
    (repo / "routing.yaml").write_text(ROUTING)
    return repo


@pytest.fixture(scope="module", params=["builtin", "uvicorn"])
def traced(
    request: pytest.FixtureRequest, repository: Path
) -> Iterator[tuple[Server, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    config = ServerConfig(
        model_repository=repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        enable_metrics=False,
        trace_rate=1.0,
        routing_header="x-user",
        http_server=request.param,
        stream_queue_responses=2,
    )
    with Server(config, span_exporter=exporter) as server:
        yield server, exporter
    assert not TRACING.enabled


def post(server: Server, path: str, body: dict[str, Any], **headers: str) -> requests.Response:
    url = f"http://127.0.0.1:{server.http_port}/v1/{path}"
    return requests.post(url, json=body, headers=headers, timeout=30)


def successes(server: Server, model: str) -> int:
    url = f"http://127.0.0.1:{server.http_port}/v2/models/{model}/stats"
    stats = requests.get(url, timeout=10).json()["model_stats"]
    return sum(int(s["inference_stats"]["success"]["count"]) for s in stats)


def test_chat_honours_the_routing_header(traced: tuple[Server, InMemorySpanExporter]) -> None:
    """A sticky route answers every chat with one key from the same target, as /infer and
    /generate do: the header is each model request's routing key."""
    server, _ = traced

    def target(key: str) -> str:
        before = {name: successes(server, name) for name in ("llm_a", "llm_b")}
        body = {"model": "sticky_llm", "messages": HELLO, "max_tokens": 2}
        reply = post(server, "chat/completions", body, **{"x-user": key})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == " hello world"
        moved = [name for name in before if successes(server, name) > before[name]]
        assert len(moved) == 1, moved
        return moved[0]

    by_key = {f"u{i}": target(f"u{i}") for i in range(12)}
    assert all(target(key) == chosen for key, chosen in by_key.items())
    assert set(by_key.values()) == {"llm_a", "llm_b"}


def spans_of(exporter: InMemorySpanExporter, trace_id: int, count: int) -> list[ReadableSpan]:
    """The server spans of one trace, once ``count`` of them were exported (a span ends
    after its response went out, so poll)."""
    deadline = time.monotonic() + 10
    while True:
        found = [
            s
            for s in exporter.get_finished_spans()
            if s.context.trace_id == trace_id and s.kind is SpanKind.SERVER
        ]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


@pytest.mark.parametrize("stream", [False, True])
def test_each_choice_of_a_chat_gets_its_span_in_the_callers_trace(
    traced: tuple[Server, InMemorySpanExporter], stream: bool
) -> None:
    server, exporter = traced
    trace = TRACE_ID[:-1] + ("1" if stream else "0")
    body = {"model": "llm_a", "messages": HELLO, "max_tokens": 2, "n": 2, "stream": stream}
    reply = post(server, "chat/completions", body, traceparent=f"00-{trace}-{PARENT_ID}-01")
    assert reply.status_code == 200, reply.text
    assert reply.headers["traceparent"].startswith(f"00-{trace}-")
    spans = spans_of(exporter, int(trace, 16), 2)
    assert len(spans) == 2  # one per model request: a choice each
    named = reply.headers["traceparent"].split("-")[2]
    assert named in {f"{s.context.span_id:016x}" for s in spans}
    for span in spans:
        assert span.name == "POST /v1/chat/completions"
        assert span.parent is not None and span.parent.span_id == int(PARENT_ID, 16)
        assert span.attributes is not None
        assert span.attributes["inferplex.model.name"] == "llm_a"
        assert span.attributes["http.response.status_code"] == 200


def test_embeddings_and_refusals_are_traced(traced: tuple[Server, InMemorySpanExporter]) -> None:
    server, exporter = traced
    # 13 inputs for a model of max_batch_size 8: two model requests, a span each
    body = {"model": "encoder", "input": ["red sun"] * 13}
    reply = post(server, "embeddings", body)
    assert reply.status_code == 200, reply.text
    _, trace_id, span_id, _ = reply.headers["traceparent"].split("-")
    spans = spans_of(exporter, int(trace_id, 16), 2)
    assert [s.name for s in spans] == ["POST /v1/embeddings"] * 2
    # no caller's trace: the first request's span is the root, the answer names it
    (root,) = (s for s in spans if s.parent is None)
    assert f"{root.context.span_id:016x}" == span_id
    assert all(s.parent.span_id == root.context.span_id for s in spans if s.parent is not None)
    refused = post(server, "chat/completions", {"model": "llm_a", "messages": []})
    assert refused.status_code == 400
    (span,) = spans_of(exporter, int(refused.headers["traceparent"].split("-")[1], 16), 1)
    assert span.name == "POST /v1/chat/completions"
    assert span.attributes is not None
    assert span.attributes["http.response.status_code"] == 400


def test_choices_queued_on_one_instance_are_read_as_they_open(
    traced: tuple[Server, InMemorySpanExporter],
) -> None:
    """llm_a has one instance and a stream holds two responses (--stream-queue-responses): the
    first choice is read while the others wait for the instance (had the answer waited for
    every choice's first response, the first would fill its channel and hold the instance)."""
    server, _ = traced
    body = {"model": "llm_a", "messages": HELLO, "max_tokens": 12, "n": 3, "stream": True}
    url = f"http://127.0.0.1:{server.http_port}/v1/chat/completions"
    with requests.post(url, json=body, stream=True, timeout=20) as reply:
        assert reply.status_code == 200, reply.text
        lines = [line for line in reply.iter_lines() if line.startswith(b"data: {")]
    texts = ["", "", ""]
    for line in lines:
        (choice,) = json.loads(line[6:])["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
    assert texts == [" hello world the cat" * 3] * 3


def test_a_large_body_is_answered(traced: tuple[Server, InMemorySpanExporter]) -> None:
    """A body over the data plane's offload size is read in a worker thread, as /infer's:
    the answer is the same."""
    server, _ = traced
    words = " ".join(["sun"] * 6000)  # about 24 KiB of prompt
    body = {"model": "llm_a", "messages": [{"role": "user", "content": words}], "max_tokens": 3}
    reply = post(server, "chat/completions", body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == " sun sun sun"
    assert reply.json()["usage"]["prompt_tokens"] > 6000
