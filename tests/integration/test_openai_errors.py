"""Bad input to the OpenAI-compatible API, on both HTTP servers: each case a 400, 404 or
413 with OpenAI's error object naming the field (``param``), and nothing reaching a model:
the models' request counts do not move, and they answer the next good request.

Every case runs in one test per server, over one keep-alive connection (a test per case
spent more time in its own requests and pytest than in the server); a failure names every
case that failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from examples.modelgen.embedder import sentence_encoder
from examples.modelgen.llm import bare_llm, mock_llm
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.integration.test_openai import HELLO, TOKEN

AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module", params=["builtin", "uvicorn"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp(f"openai_errors_{request.param}")
    mock_llm(root, instances=1)  # the models the cases name, and no more: a faster start
    bare_llm(root)
    sentence_encoder(root)
    running = start_server(
        root,
        root.parent / f"server_{request.param}.log",
        env={"INFERPLEX_INFERENCE_TOKEN": TOKEN},
        args=[
            *("--http-server", request.param),
            *("--max-request-bytes", str(1 << 20)),
            *("--openai-max-choices", "4"),
        ],
    )
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


def post(session: requests.Session, url: str, path: str, body: Any) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**AUTH, "content-type": "application/json"}
    return session.post(f"{url}/v1/{path}", data=data, headers=headers, timeout=30)


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "mock_llm", "messages": HELLO, **fields}


LONG = " ".join(["hello"] * 300)

#: (path, body, status, param, words the message must hold)
CASES: list[tuple[str, Any, int, str | None, str]] = [
    ("chat/completions", chat(model="nope"), 404, None, "'nope'"),
    ("completions", {"model": "nope", "prompt": "x"}, 404, None, "'nope'"),
    ("embeddings", {"model": "nope", "input": "x"}, 404, None, "'nope'"),
    (
        "completions",
        {"model": "mock_llm", "prompt": LONG},
        400,
        "prompt",
        "context of 256 tokens; this request asks for 300",
    ),
    (
        "chat/completions",
        chat(messages=[{"role": "user", "content": LONG}]),
        400,
        "messages",
        "context of 256 tokens",
    ),
    ("chat/completions", chat(max_tokens=250), 400, "max_tokens", "context of 256 tokens"),
    ("chat/completions", chat(max_tokens=0), 400, "max_tokens", "at least 1, got 0"),
    ("completions", {"model": "mock_llm", "prompt": "x", "max_tokens": -3}, 400, "max_tokens", ""),
    ("chat/completions", chat(max_completion_tokens=0), 400, "max_completion_tokens", ""),
    ("chat/completions", chat(n=5), 400, "n", "between 1 and 4"),
    ("chat/completions", chat(n=0), 400, "n", "between 1 and 4"),
    ("completions", {"model": "mock_llm", "prompt": ["a", "b", "c"], "n": 2}, 400, "prompt", "6"),
    ("chat/completions", chat(messages="hello"), 400, "messages", "non-empty array"),
    ("chat/completions", chat(messages=[]), 400, "messages", "non-empty array"),
    ("chat/completions", chat(messages=["hello"]), 400, "messages[0]", "an object"),
    ("chat/completions", chat(messages=[{"role": "user"}]), 400, "messages[0].content", ""),
    (
        "chat/completions",
        chat(messages=[{"role": "wizard", "content": "x"}]),
        400,
        "messages[0].role",
        "got 'wizard'",
    ),
    (
        "chat/completions",
        chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
        400,
        "messages[0].content[0]",
        "only text parts",
    ),
    (
        "chat/completions",
        chat(messages=[{"role": "user", "content": "x", "colour": "red"}]),
        400,
        "messages[0].colour",
        "unknown field",
    ),
    (
        "chat/completions",
        b'{"model": "mock_llm", "messages": [{"role": "user", "content": "caf\xe9 \xff"}]}',
        400,
        "messages[0].content",
        "not valid UTF-8",
    ),
    ("chat/completions", b"{not json", 400, None, "not valid JSON"),
    ("chat/completions", chat(colour="red"), 400, "colour", "unrecognized request argument"),
    ("chat/completions", chat(tools=[{"type": "function"}]), 400, "tools", "not supported"),
    ("chat/completions", chat(stream_options={"include_usage": True}), 400, "stream_options", ""),
    ("chat/completions", chat(top_logprobs=2), 400, "top_logprobs", "'logprobs': true"),
    ("chat/completions", chat(temperature=3), 400, "temperature", "between 0.0 and 2.0"),
    ("chat/completions", chat(model="bare_llm"), 400, "messages", "no chat template"),
    (
        "completions",
        {"model": "bare_llm", "prompt": "x", "temperature": 0.5},
        400,
        "temperature",
        "cannot honour 'temperature'",
    ),
    ("completions", {"model": "bare_llm", "prompt": "x", "logprobs": 1}, 400, "logprobs", ""),
    ("completions", {"model": "encoder", "prompt": "x"}, 400, "model", "does not generate text"),
    ("embeddings", {"model": "mock_llm", "input": "x"}, 400, "model", "not an embedding model"),
    ("embeddings", {"model": "encoder", "input": ""}, 400, "input[0]", "empty string"),
    ("embeddings", {"model": "encoder", "input": "x", "dimensions": 4}, 400, "dimensions", ""),
    (
        "embeddings",
        {"model": "encoder", "input": "x", "encoding_format": "int8"},
        400,
        "encoding_format",
        "",
    ),
    (
        "embeddings",
        {"model": "encoder", "input": ["x", " ".join(["cat"] * 40)]},
        400,
        "input[1]",
        "at most 32 tokens per input; input 1 has 42",
    ),
    ("chat/completions", b"x" * ((1 << 20) + 1), 413, None, "--max-request-bytes"),
]


def counts(session: requests.Session, url: str) -> dict[str, int]:
    found = session.get(f"{url}/v2/models/stats", headers=AUTH, timeout=30).json()
    return {s["name"]: s["inference_stats"]["success"]["count"] for s in found["model_stats"]}


def refusal_problems(
    session: requests.Session,
    url: str,
    path: str,
    body: Any,
    status: int,
    param: str | None,
    words: str,
) -> list[str]:
    """What is wrong with the server's answer to one bad request (nothing: as it should be)."""
    before = counts(session, url)
    reply = post(session, url, path, body)
    if reply.status_code != status:
        return [f"status {reply.status_code}, not {status}: {reply.text[:300]}"]
    error = reply.json()["error"]
    problems = []
    if set(error) != {"message", "type", "param", "code"}:
        problems.append(f"error fields {sorted(error)}")
    if error["param"] != param:
        problems.append(f"param {error['param']!r}, not {param!r}")
    if words not in error["message"]:
        problems.append(f"message {error['message']!r} lacks {words!r}")
    if counts(session, url) != before:
        problems.append("a model was called")
    return problems


def test_bad_input_is_refused_naming_the_field(server: RunningServer) -> None:
    url = f"http://{server.http_url}"
    failed = {}
    with requests.Session() as session:
        for number, (path, body, status, param, words) in enumerate(CASES):
            problems = refusal_problems(session, url, path, body, status, param, words)
            if problems:
                failed[f"case {number}: {path} {str(body)[:80]}"] = problems
    assert not failed, "\n".join(f"{case}: {'; '.join(p)}" for case, p in failed.items())


def test_refusals_before_any_endpoint_are_openai_errors(server: RunningServer) -> None:
    missing = requests.get(f"http://{server.http_url}/v1/nothing", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    anonymous = requests.post(f"http://{server.http_url}/v1/chat/completions", json=chat())
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    wrong_method = requests.get(f"http://{server.http_url}/v1/chat/completions", headers=AUTH)
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


def test_the_models_answer_after_bad_input(server: RunningServer) -> None:
    with requests.Session() as session:
        reply = post(session, f"http://{server.http_url}", "chat/completions", chat(max_tokens=2))
    assert reply.status_code == 200
    assert reply.json()["choices"][0]["message"]["content"] == " hello world"
