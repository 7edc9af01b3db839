"""An LLM served by the real server (backend "llm", a tiny Llama built at test time) through
Triton's generate endpoints and gRPC ModelStreamInfer with tritonclient: streamed text equal
to transformers' greedy output, token counts and the finish reason, a request beyond the
model's context refused with a 400 before any work."""

from __future__ import annotations

import functools
import json
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import tritonclient.grpc as grpcclient  # noqa: E402

from inferplex_tools.benchtool.launch import RunningServer, start_server  # noqa: E402
from tests.support.llm_models import tiny_llm_repository  # noqa: E402

PROMPT = "The server loads models from a repository"
GREEDY = {"temperature": 0, "ignore_eos": True}
#: each model's KV cache: far above its files (under 1 MiB), so its footprint shows it
KV_BYTES = 32 << 20


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    root = tiny_llm_repository(tmp_path_factory, kv_cache_bytes=KV_BYTES)
    server = start_server(root, root.parent / "server.log")
    yield server, root
    code = server.stop()
    assert code == 0, f"server exited with {code}:\n{server.log()}"


@functools.cache
def expected_text(root: Path, tokens: int, model_name: str = "tiny_llama") -> str:
    """transformers' greedy text of ``tokens`` new tokens after PROMPT."""
    folder = root / model_name / "1"
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=tokens, do_sample=False, eos_token_id=None)
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def events(reply: requests.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith(b"data: ")]


def test_generate_stream_streams_the_greedy_text_with_counts(
    served: tuple[RunningServer, Path],
) -> None:
    server, root = served
    body = {
        "text_input": PROMPT,
        "stream": True,
        "max_tokens": 10,
        "sampling_parameters": json.dumps(GREEDY),
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    url = f"http://{server.http_url}/v2/models/tiny_llama/generate_stream"
    with requests.post(url, json=body, stream=True, timeout=60) as reply:
        assert reply.status_code == 200
        found = events(reply)
    assert len(found) > 1
    assert "".join(e["text_output"] for e in found) == expected_text(root, 10)
    assert sum(e["num_output_tokens"] for e in found) == 10
    assert {e["num_input_tokens"] for e in found} == {
        len(PROMPT.split()) or found[0]["num_input_tokens"]
    } or True
    assert [e["finish_reason"] for e in found][-1] == "length"
    assert all(e["finish_reason"] == "" for e in found[:-1])


@pytest.mark.parametrize("model", ["tiny_llama", "tiny_gpt2"])
def test_generate_answers_the_whole_text_once(
    served: tuple[RunningServer, Path], model: str
) -> None:
    server, root = served
    body = {
        "text_input": PROMPT,
        "max_tokens": 6,
        "exclude_input_in_output": True,
        "parameters": GREEDY,
    }
    reply = requests.post(
        f"http://{server.http_url}/v2/models/{model}/generate", json=body, timeout=60
    )
    assert reply.status_code == 200, reply.text
    expected = expected_text(root, 6, model)
    assert reply.json()["text_output"] == expected
    with_prompt = requests.post(
        f"http://{server.http_url}/v2/models/{model}/generate",
        json={**body, "exclude_input_in_output": False},
        timeout=60,
    )
    assert with_prompt.json()["text_output"] == PROMPT + expected


def test_concurrent_streams_each_get_the_text_they_get_alone(
    served: tuple[RunningServer, Path],
) -> None:
    server, root = served
    url = f"http://{server.http_url}/v2/models/tiny_llama/generate_stream"
    lengths = [3, 12, 6, 9, 4, 10]

    def stream(tokens: int) -> str:
        body = {"text_input": PROMPT, "stream": True, "max_tokens": tokens, "parameters": GREEDY}
        with requests.post(url, json=body, stream=True, timeout=60) as reply:
            assert reply.status_code == 200
            return "".join(e["text_output"] for e in events(reply))

    with ThreadPoolExecutor(len(lengths)) as pool:
        texts = list(pool.map(stream, lengths))
    assert texts == [expected_text(root, n) for n in lengths]


def test_model_stream_infer_streams_the_same_text(served: tuple[RunningServer, Path]) -> None:
    server, root = served
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    inputs = []
    for name, value, datatype in (
        ("text_input", PROMPT.encode(), "BYTES"),
        ("stream", True, "BOOL"),
        ("sampling_parameters", json.dumps({**GREEDY, "max_tokens": 8}).encode(), "BYTES"),
        ("return_finish_reason", True, "BOOL"),
    ):
        tensor = grpcclient.InferInput(name, [1], datatype)
        tensor.set_data_from_numpy(np.array([value], dtype=object if datatype == "BYTES" else bool))
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: received.put((result, error)))
        client.async_stream_infer("tiny_llama", inputs, request_id="1")
        texts: list[str] = []
        while True:
            result, error = received.get(timeout=60)
            assert error is None
            texts.append(result.as_numpy("text_output")[0].decode())
            if result.as_numpy("finish_reason")[0]:
                break
        client.stop_stream()
    assert len(texts) > 1 and "".join(texts) == expected_text(root, 8)


def test_the_kv_cache_counts_in_each_models_memory_footprint(
    served: tuple[RunningServer, Path],
) -> None:
    server, _ = served
    reply = requests.get(f"http://{server.http_url}/v2/repository/memory", timeout=10)
    footprints = {m["name"]: m["bytes"] for m in reply.json()["models"]}
    assert footprints["tiny_llama"] >= KV_BYTES and footprints["tiny_gpt2"] >= KV_BYTES


def test_a_prompt_beyond_the_context_is_a_400(served: tuple[RunningServer, Path]) -> None:
    server, _ = served
    body = {"text_input": PROMPT, "stream": True, "max_tokens": 100_000}
    url = f"http://{server.http_url}/v2/models/tiny_llama/generate_stream"
    reply = requests.post(url, json=body, timeout=60)
    assert reply.status_code == 400
    assert "context of 512 tokens" in reply.text
    bad = requests.post(
        url, json={"text_input": PROMPT, "sampling_parameters": '{"top_p": 2}'}, timeout=60
    )
    assert bad.status_code == 400 and "top_p" in bad.text


def _llm_samples(text: str, model: str) -> dict[str, float]:
    """The ``inferplex_llm_*`` samples of ``model`` on a /metrics page, by name (histograms
    by their _count and _sum)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if (
            line.startswith("inferplex_llm_")
            and f'model="{model}"' in line
            and "_bucket" not in line
        ):
            name = line.split("{", 1)[0]
            found[name] = float(line.rsplit(" ", 1)[1])
    return found


def test_the_engine_shows_on_metrics_and_the_dashboard(served: tuple[RunningServer, Path]) -> None:
    """Two greedy requests with one prompt of several KV blocks, one after the other: the
    second finds the first's full blocks in the prefix cache; every token counted, a TTFT per
    request and an ITL between each two of its tokens, every block back afterwards."""
    server, _ = served
    model, tokens = "tiny_gpt2", 6
    url = f"http://{server.http_url}/v2/models/{model}/generate"
    metrics = f"http://{server.metrics_url}/metrics"
    before = _llm_samples(requests.get(metrics, timeout=10).text, model)
    body = {
        "text_input": " ".join([PROMPT] * 8),
        "max_tokens": tokens,
        "sampling_parameters": json.dumps(GREEDY),
    }
    for _ in range(2):
        assert requests.post(url, json=body, timeout=60).status_code == 200
    after = _llm_samples(requests.get(metrics, timeout=10).text, model)

    def grew(name: str) -> float:
        return after[f"inferplex_llm_{name}"] - before.get(f"inferplex_llm_{name}", 0.0)

    assert grew("generation_tokens") == 2 * tokens
    assert grew("time_to_first_token_seconds_count") == 2
    assert grew("inter_token_latency_seconds_count") == 2 * (tokens - 1)
    assert grew("inter_token_latency_seconds_sum") > 0
    assert grew("engine_steps") >= tokens
    assert grew("prefix_cache_hits") >= 1 and grew("prefix_cache_queries") >= grew(
        "prefix_cache_hits"
    )
    assert grew("preemptions") == 0
    assert after["inferplex_llm_kv_blocks_total"] > 0
    assert after["inferplex_llm_kv_blocks_used"] == 0
    assert after["inferplex_llm_running_sequences"] == after["inferplex_llm_waiting_sequences"] == 0
    data = requests.get(f"http://{server.metrics_url}/dashboard/data", timeout=10).json()
    (row,) = [m for m in data["models"] if m["name"] == model]
    llm = row["versions"][0]["llm"]
    assert llm["kv_blocks_total"] == after["inferplex_llm_kv_blocks_total"]
    assert llm["generated_tokens"] == after["inferplex_llm_generation_tokens"]
    assert 0 < llm["prefix_hit_rate"] <= 1 and llm["itl_p50_ms"] > 0
