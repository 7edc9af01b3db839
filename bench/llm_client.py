"""The LLM comparison's own small client (bench/llm_vs_vllm.py, ``--client native``): the same
requests, at a fixed concurrency, to inferplex's ``/generate_stream`` or to an OpenAI
``/v1/completions`` (vLLM's), streamed; figures computed as aiperf computes them.

Per request: TTFT is the time to the first piece of text, the inter-token latency is
(request latency - TTFT) / (output tokens - 1), and the output tokens are the server's count
(inferplex's ``num_output_tokens``, the OpenAI stream's ``usage``). A load's output tokens/s
and requests/s are over the wall time from its first request sent to its last answered.
Each of ``concurrency`` threads sends its next request when its previous one ends.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import requests

#: the two ways a server is asked: inferplex's generate endpoint, OpenAI's completions
INFERPLEX, OPENAI = "inferplex", "openai"


@dataclass(frozen=True)
class Target:
    """Where the requests go: ``kind`` (INFERPLEX or OPENAI), ``url`` (http://host:port),
    ``model`` (the name the server knows the model by)."""

    kind: str
    url: str
    model: str


@dataclass(frozen=True)
class Job:
    """One request: the prompt and exactly how many tokens to generate."""

    prompt: str
    tokens: int


@dataclass(frozen=True)
class Timed:
    ttft_s: float
    latency_s: float
    output_tokens: int


@dataclass(frozen=True)
class LoadResult:
    """A load's figures (milliseconds for latencies), as aiperf's export names them."""

    requests: int
    output_token_throughput: float
    request_throughput: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _body(target: Target, job: Job) -> dict[str, Any]:
    if target.kind == INFERPLEX:
        settings = {"temperature": 0, "ignore_eos": True, "min_tokens": job.tokens}
        return {
            "text_input": job.prompt,
            "stream": True,
            "max_tokens": job.tokens,
            "sampling_parameters": json.dumps(settings),
            "return_num_output_tokens": True,
        }
    return {
        "model": target.model,
        "prompt": job.prompt,
        "max_tokens": job.tokens,
        "min_tokens": job.tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _events(reply: requests.Response) -> Iterator[dict[str, Any]]:
    for line in reply.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            yield json.loads(line[6:])


def _pieces(target: Target, event: dict[str, Any]) -> tuple[bool, int]:
    """(whether the event carries text, output tokens it counts)."""
    if target.kind == INFERPLEX:
        return bool(event.get("text_output")), int(event.get("num_output_tokens", 0))
    usage = event.get("usage") or {}
    text = any(c.get("text") for c in event.get("choices", []))
    return text, int(usage.get("completion_tokens") or 0)


def one_request(session: requests.Session, target: Target, job: Job) -> Timed:
    path = (
        f"/v2/models/{target.model}/generate_stream"
        if target.kind == INFERPLEX
        else "/v1/completions"
    )
    start = time.perf_counter()
    first = None
    tokens = 0
    with session.post(target.url + path, json=_body(target, job), stream=True, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{target.url}{path}: HTTP {r.status_code}: {r.text[:300]}")
        for event in _events(r):
            text, count = _pieces(target, event)
            if text and first is None:
                first = time.perf_counter()
            tokens += count
    end = time.perf_counter()
    return Timed((first or end) - start, end - start, tokens)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def drive(
    target: Target, jobs: Iterable[Job], concurrency: int, until: float | None = None
) -> LoadResult:
    """Send ``jobs`` with ``concurrency`` in flight; raises the first failure. ``until``: a
    ``time.perf_counter()`` after which no new request starts (``jobs`` may then be endless,
    e.g. ``itertools.cycle``)."""
    lock = threading.Lock()
    pending = iter(jobs)
    done: list[Timed] = []
    failures: list[BaseException] = []

    def worker() -> None:
        with requests.Session() as session:
            while not failures:
                with lock:
                    job = next(pending, None)
                if job is None or (until is not None and time.perf_counter() >= until):
                    return
                try:
                    timed = one_request(session, target, job)
                except BaseException as exc:  # reported by drive, in the caller's thread
                    failures.append(exc)
                    return
                with lock:
                    done.append(timed)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    if failures:
        raise failures[0]
    ttft = [t.ttft_s * 1e3 for t in done]
    itl = [
        (t.latency_s - t.ttft_s) * 1e3 / (t.output_tokens - 1) for t in done if t.output_tokens > 1
    ]
    return LoadResult(
        len(done),
        sum(t.output_tokens for t in done) / wall,
        len(done) / wall,
        _percentile(ttft, 0.5),
        _percentile(ttft, 0.99),
        _percentile(itl, 0.5),
        _percentile(itl, 0.99),
    )
