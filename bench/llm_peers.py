"""The peers of bench/llm_vs_vllm.py: vLLM's OpenAI server (its own venv), an aiperf run
against either server, and Hugging Face ``generate`` with static batches in process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.llm_client import Job, LoadResult, Target
from inferplex_tools.benchtool.launch import free_port

HOST = "127.0.0.1"


def start_vllm(
    python: Path, folder: Path, log: Path, kv_cache_bytes: int
) -> tuple[subprocess.Popen[bytes], str]:
    """vLLM's OpenAI server for the model ``folder`` on a free loopback port (through the
    module: the ``vllm`` command looks up metadata the CPU wheel lacks); (process, url)."""
    port = free_port(HOST)
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": str(max(1, kv_cache_bytes >> 30)),
    }
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(folder), "--host", HOST, "--port", str(port),
        "--max-model-len", "512",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return process, f"http://{HOST}:{port}"


def aiperf_load(
    venv: Path, target: Target, folder: Path, concurrency: int, jobs: list[Job], isl: int
) -> LoadResult:
    """aiperf's streaming chat profile of ``len(jobs)`` requests at ``concurrency``: the same
    command for both servers. Output lengths: the jobs' (a fixed one, or their mean and
    spread for a mixed load, as aiperf draws them)."""
    lengths = [j.tokens for j in jobs]
    mean = sum(lengths) / len(lengths)
    spread = (sum((n - mean) ** 2 for n in lengths) / len(lengths)) ** 0.5
    out = Path(tempfile.mkdtemp(prefix="aiperf-"))
    command = [
        str(venv / "bin" / "aiperf"), "profile",
        "--model", target.model, "--url", target.url,
        "--endpoint-type", "chat", "--streaming",
        "--tokenizer", str(folder),
        "--concurrency", str(concurrency),
        "--request-count", str(len(jobs)), "--warmup-request-count", "4",
        "--isl", str(isl), "--isl-stddev", "0",
        "--osl", str(round(mean)), "--osl-stddev", str(round(spread)),
        "--random-seed", "1",
        # every request generates the max_tokens aiperf draws for it
        "--extra-inputs", "ignore_eos:true", *([f"min_tokens:{round(mean)}"] if not spread else []),
        "--use-server-token-count", "--ui", "none", "--no-server-metrics",
        "--artifact-dir", str(out),
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        found = json.loads((out / "profile_export_aiperf.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)

    def stat(name: str, key: str) -> float:
        return float(found[name][key])

    return LoadResult(
        len(jobs),
        stat("output_token_throughput", "avg"),
        stat("request_throughput", "avg"),
        stat("time_to_first_token", "p50"),
        stat("time_to_first_token", "p99"),
        stat("inter_token_latency", "p50"),
        stat("inter_token_latency", "p99"),
    )


def hf_static(folder: Path, jobs: list[Job], batch: int, threads: int) -> LoadResult:
    """Hugging Face ``generate`` over the jobs in static batches of ``batch``, in arrival
    order: a batch runs until its longest output; only the tokens each job asked for count.
    TTFT is each batch's prefill as its requests see it (the batch's start: they wait for
    the batches before theirs); ITL the batch's time per step. The prefill is timed by a
    generate of one token first, whose time is then left out of the wall time."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(threads)
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    model.eval()
    useful = 0
    timing = 0.0  # the prefill-only runs' seconds, not part of the load
    ttft: list[float] = []
    itl: list[float] = []
    start = time.perf_counter()
    for first in range(0, len(jobs), batch):
        group = jobs[first : first + batch]
        ids = [tokenizer(j.prompt, add_special_tokens=False).input_ids for j in group]
        width = min(len(i) for i in ids)
        inputs = torch.tensor([i[:width] for i in ids])  # equal lengths: no padding
        mask = torch.ones_like(inputs)
        longest = max(j.tokens for j in group)
        began = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                inputs, attention_mask=mask, max_new_tokens=1, min_new_tokens=1, do_sample=False
            )
            prefill = time.perf_counter() - began
            model.generate(inputs, max_new_tokens=longest, min_new_tokens=longest, do_sample=False)
        spent = time.perf_counter() - began - prefill
        useful += sum(j.tokens for j in group)
        ttft += [(began - start - timing + prefill) * 1e3] * len(group)
        timing += prefill
        itl += [spent * 1e3 / max(longest - 1, 1)] * len(group)
    wall = time.perf_counter() - start - timing
    ttft.sort()
    itl.sort()

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return LoadResult(
        len(jobs),
        useful / wall,
        len(jobs) / wall,
        pct(ttft, 0.5),
        pct(ttft, 0.99),
        pct(itl, 0.5),
        pct(itl, 0.99),
    )
