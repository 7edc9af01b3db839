"""The OpenAI-compatible API against a real server, on the built-in HTTP server and its
uvicorn twin, with the official ``openai`` client (sync and async, streamed and not): chat,
completions and embeddings over Triton-style decoupled Python models and an ONNX sentence
encoder; the inference token as the API key; usage, finish reasons, stop sequences, ``n``,
``echo``, log-probabilities; and a client that goes away mid-stream (the model stops).
Bad input is in test_openai_errors.py."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import requests

from examples.modelgen.embedder import sentence_encoder
from examples.modelgen.llm import bare_llm, mock_llm
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.polling import wait_for

TOKEN = "openai-test-key"
HELLO = [{"role": "user", "content": "hello world the cat"}]


class Served:
    def __init__(self, server: RunningServer, progress: Path) -> None:
        self.server = server
        self.progress = progress
        self.base_url = f"http://{server.http_url}/v1"
        self._client = openai.OpenAI(base_url=self.base_url, api_key=TOKEN, max_retries=0)

    def client(self) -> openai.OpenAI:
        """One client for the module's tests, closed with the server."""
        return self._client

    def close(self) -> None:
        self._client.close()

    def async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=TOKEN, max_retries=0)


def openai_repository(root: Path) -> Path:
    """mock_llm, bare_llm, a slow mock_llm that reports its progress, the encoder."""
    mock_llm(root)
    bare_llm(root)
    progress = root / "slow.progress"
    mock_llm(root, "slow_llm", delay_ms=20, progress=progress, instances=1, context_length=10**6)
    sentence_encoder(root)
    sentence_encoder(root, "encoder_matryoshka", matryoshka=True)
    return progress


@pytest.fixture(scope="module", params=["builtin", "uvicorn"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp(f"openai_{request.param}")
    progress = openai_repository(root)
    server = start_server(
        root,
        root.parent / f"server_{request.param}.log",
        env={"INFERPLEX_INFERENCE_TOKEN": TOKEN},
        args=["--http-server", request.param, "--max-request-bytes", str(1 << 20)],
    )
    found = Served(server, progress)
    yield found
    found.close()
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log()}"


def test_models_are_listed_and_retrieved(served: Served) -> None:
    client = served.client()
    names = {m.id for m in client.models.list()}
    assert {"mock_llm", "bare_llm", "slow_llm", "encoder"} <= names
    model = client.models.retrieve("mock_llm")
    assert model.id == "mock_llm" and model.object == "model" and model.owned_by
    with pytest.raises(openai.NotFoundError) as found:
        client.models.retrieve("nope")
    assert found.value.code == "model_not_found"


def test_the_api_key_is_the_inference_token(served: Served) -> None:
    with (
        openai.OpenAI(base_url=served.base_url, api_key="wrong", max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError) as refused,
    ):
        wrong.chat.completions.create(model="mock_llm", messages=HELLO)
    assert refused.value.status_code == 401
    assert refused.value.body is not None and refused.value.body["type"] == "authentication_error"


def test_chat_answers_with_usage_and_finish_reason(served: Served) -> None:
    client = served.client()
    answer = client.chat.completions.create(model="mock_llm", messages=HELLO, max_tokens=6)
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == " hello world the cat hello world"
    assert choice.finish_reason == "length"
    assert answer.model == "mock_llm" and answer.object == "chat.completion"
    assert answer.usage is not None
    # the model reports its tokens (num_input_tokens: the prompt's words)
    assert answer.usage.completion_tokens == 6
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 6
    once = client.chat.completions.create(model="mock_llm", messages=HELLO)
    assert once.choices[0].finish_reason == "stop"
    assert once.choices[0].message.content == " hello world the cat"


def test_chat_streams_token_by_token_with_usage_last(served: Served) -> None:
    client = served.client()
    chunks = list(
        client.chat.completions.create(
            model="mock_llm",
            messages=HELLO,
            max_completion_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices]
    assert texts == [" hello", " world", " the", " cat", " hello"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_a_bare_triton_model_streams_and_the_server_enforces_limits(served: Served) -> None:
    """text_input and stream only: usage from the text, max_tokens and stop honoured by the
    server."""
    client = served.client()
    stream = client.completions.create(model="bare_llm", prompt="red green blue sun", stream=True)
    chunks = [(c.choices[0].text, c.choices[0].finish_reason) for c in stream]
    assert chunks == [(" red", None), (" green", None), (" blue", None), (" sun", "stop")]
    cut = client.completions.create(model="bare_llm", prompt="red green blue sun", max_tokens=2)
    assert cut.choices[0].text == " red green" and cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.prompt_tokens == 4
    assert cut.usage.completion_tokens == 2
    stopped = client.completions.create(model="bare_llm", prompt="red green blue", stop=" blue")
    assert stopped.choices[0].text == " red green" and stopped.choices[0].finish_reason == "stop"


def test_completions_with_prompts_choices_echo_and_seed(served: Served) -> None:
    client = served.client()
    answer = client.completions.create(
        model="mock_llm", prompt=["red green", "sun moon"], n=2, max_tokens=2, seed=0
    )
    texts = [(c.index, c.text) for c in answer.choices]
    # choice i of one seed starts i words further (the mock's use of the seed)
    assert texts == [(0, " red green"), (1, " green red"), (2, " sun moon"), (3, " moon sun")]
    echoed = client.completions.create(model="mock_llm", prompt="day night", echo=True)
    assert echoed.choices[0].text == "day night day night"


def test_stop_sequences_across_streamed_tokens(served: Served) -> None:
    client = served.client()
    stream = client.chat.completions.create(
        model="mock_llm", messages=HELLO, stream=True, stop=["the c"], max_tokens=8
    )
    pieces = [(c.choices[0].delta.content, c.choices[0].finish_reason) for c in stream]
    assert "".join(p or "" for p, _ in pieces) == " hello world "
    assert pieces[-1][1] == "stop"


def test_logprobs_where_the_model_gives_them(served: Served) -> None:
    client = served.client()
    chat = client.chat.completions.create(
        model="mock_llm", messages=HELLO, max_tokens=2, logprobs=True, top_logprobs=2
    )
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [t.token for t in content] == ["hello", "world"]
    assert [len(t.top_logprobs) for t in content] == [2, 2]
    assert content[0].logprob == -0.5
    done = client.completions.create(model="mock_llm", prompt="red sun", max_tokens=2, logprobs=1)
    logprobs = done.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens == ["red", "sun"]
    assert logprobs.top_logprobs == [{"red": -0.5}, {"sun": -0.5}]


def test_embeddings_as_floats_and_base64(served: Served) -> None:
    client = served.client()
    texts = ["hello world", "the cat", "hello world", *(["red sun"] * 10)]
    answer = client.embeddings.create(model="encoder", input=texts)
    vectors = np.array([d.embedding for d in answer.data])
    assert vectors.shape == (13, 16) and [d.index for d in answer.data] == list(range(13))
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.allclose(vectors[0], vectors[2]) and not np.allclose(vectors[0], vectors[1])
    # [CLS] and [SEP] around each: 4 tokens each
    assert answer.usage.prompt_tokens == 4 * 13
    packed = client.embeddings.create(
        model="encoder", input="hello world", encoding_format="base64"
    )
    raw = packed.data[0].embedding
    if isinstance(raw, str):  # the client decodes base64 itself when it asked for floats
        raw = np.frombuffer(base64.b64decode(raw), "<f4").tolist()
    assert np.allclose(raw, vectors[0], atol=1e-6)
    short = client.embeddings.create(model="encoder_matryoshka", input="hello", dimensions=4)
    assert len(short.data[0].embedding) == 4
    assert np.isclose(np.linalg.norm(short.data[0].embedding), 1, atol=1e-5)


def test_the_async_client(served: Served) -> None:
    async def run() -> tuple[str, str, int]:
        client = served.async_client()
        try:
            stream = await client.chat.completions.create(
                model="mock_llm", messages=HELLO, stream=True, max_tokens=3
            )
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream])
            done = await client.completions.create(model="mock_llm", prompt="dog cat", max_tokens=2)
            vectors = await client.embeddings.create(model="encoder", input=["a", "b", "c"])
            return streamed, done.choices[0].text, len(vectors.data)
        finally:
            await client.close()

    assert asyncio.run(run()) == (" hello world the", " dog cat", 3)


def test_a_client_that_goes_away_mid_stream_stops_the_model(served: Served) -> None:
    served.progress.write_text("")
    body = (
        b'{"model": "slow_llm", "stream": true, "max_tokens": 100000, '
        b'"messages": [{"role": "user", "content": "tokens come one by one"}]}'
    )
    host, port = served.server.http_url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {TOKEN}"
            f"\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        received = b""
        while received.count(b"data: ") < 3:
            chunk = sock.recv(4096)
            assert chunk, received.decode(errors="replace")
            received += chunk
        assert b" 200 " in received.split(b"\r\n", 1)[0]
    wait_for(lambda: served.progress.read_text() == "cancelled")


def test_generation_metrics_and_dashboard(served: Served) -> None:
    """TTFT and inter-token latency histograms, prompt and completion token counters per
    model, on /metrics and in the dashboard's data."""
    client = served.client()
    list(client.completions.create(model="bare_llm", prompt="sun moon star", stream=True))
    text = requests.get(f"http://{served.server.metrics_url}/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    model = 'model="bare_llm"'
    assert float(lines[f"inferplex_time_to_first_token_seconds_count{{{model}}}"]) >= 1
    # three tokens streamed: two gaps between them, at least
    assert float(lines[f"inferplex_inter_token_latency_seconds_count{{{model}}}"]) >= 2
    assert float(lines[f"inferplex_prompt_tokens{{{model}}}"]) >= 3
    assert float(lines[f"inferplex_completion_tokens{{{model}}}"]) >= 3
    data = requests.get(f"http://{served.server.metrics_url}/dashboard/data").json()
    row = next(g for g in data["generation"] if g["model"] == "bare_llm")
    assert row["completion_tokens"] >= 3 and row["ttft_p50_ms"] is not None
