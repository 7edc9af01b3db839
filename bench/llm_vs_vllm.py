"""inferplex's LLM engine side by side with vLLM (CPU) on the same model, the same machine
and the same requests, and the Hugging Face ``generate`` static-batching baseline in process.

    python -m bench.llm_vs_vllm [--install] [--client native|aiperf] [--concurrency 1 4 16]
                                [--requests 40] [--isl 128] [--osl 64] [--no-mixed]
                                [--servers inferplex vllm] [--no-hf] [--small]

Builds the reference model once (``examples.build_llm --reference``: a Llama of hidden 512,
8 layers, 8 heads / 4 KV heads, random weights, a tokenizer trained locally with a chat
template) under ``--work``; serves it from inferplex (``backend: "llm"``) and from vLLM
(``/tmp/vllm-venv``, made by ``bench/peers/install_llm.sh``, run with ``--install``), both
up at once and driven in turn with the same load: each concurrency of ``--concurrency``
(``--isl`` prompt tokens, exactly ``--osl`` output tokens) and a mixed-length load (output
lengths uniform in 16-256, at the highest concurrency). ``--client native`` (default) drives
inferplex's ``/generate_stream`` and vLLM's ``/v1/completions`` with bench/llm_client.py;
``--client aiperf`` runs the same aiperf command (``/tmp/aiperf-venv``, streaming chat,
``/v1/chat/completions``) on both.

Prints, per load and server: output tokens/s, TTFT and ITL p50/p99, requests/s, the peak RSS
of the server's process tree over the run, and the ratios inferplex / vLLM and inferplex /
static batching; writes JSON to the results folder (bench/outputs.py). ``--small`` uses a
tiny model and few requests: a smoke test of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import requests

from bench.llm_client import INFERPLEX, OPENAI, Job, LoadResult, Target, drive
from bench.llm_peers import aiperf_load, hf_static, start_vllm
from bench.outputs import add_results_option, result_path

HERE = Path(__file__).resolve().parent
INSTALL = HERE / "peers" / "install_llm.sh"
VLLM_VENV = Path(os.environ.get("VLLM_VENV", "/tmp/vllm-venv"))
AIPERF_VENV = Path(os.environ.get("AIPERF_VENV", "/tmp/aiperf-venv"))
MODEL = "llm"
MIXED = (16, 256)


class PeakRss:
    """The largest RSS of a process and its children, sampled every 0.25 s on a thread."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                tree = [self._process, *self._process.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def build_model(work: Path, small: bool, kv_cache_bytes: int, threads: int) -> Path:
    """The repository holding the model (built once per size), for inferplex."""
    from examples.build_llm import REFERENCE_INTERMEDIATE, build_llm

    repository = work / ("repo-small" if small else "repo")
    if (repository / MODEL / "1" / "config.json").exists():
        return repository
    size: dict[str, Any] = (
        # head dim 64: vLLM's CPU attention takes only its usual head sizes
        {"hidden": 128, "layers": 2, "heads": 2, "kv_heads": 1, "vocab": 512}
        if small
        else {"hidden": 512, "layers": 8, "heads": 8, "kv_heads": 4, "vocab": 16000}
    )
    parameters = {
        "kv_cache_bytes": str(kv_cache_bytes),
        "max_num_seqs": "64",
        "threads": str(threads),
    }
    intermediate = 0 if small else REFERENCE_INTERMEDIATE
    build_llm(repository, MODEL, "llama", **size, parameters=parameters, intermediate=intermediate)
    return repository


def prompts(folder: Path, count: int, tokens: int, seed: int) -> list[str]:
    """``count`` texts of exactly ``tokens`` tokens each (random tokens, decoded and trimmed
    until they encode to that length)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rng = random.Random(seed)
    vocab = tokenizer.get_vocab_size()
    texts = []
    for _ in range(count):
        ids = [rng.randrange(3, vocab) for _ in range(tokens)]
        for _ in range(20):  # decoding and encoding again may merge or split pieces
            text = tokenizer.decode(ids)
            ids = tokenizer.encode(text, add_special_tokens=False).ids[:tokens]
            while len(ids) < tokens:
                ids.append(rng.randrange(3, vocab))
            if len(tokenizer.encode(tokenizer.decode(ids), add_special_tokens=False).ids) == tokens:
                break
        texts.append(tokenizer.decode(ids))
    return texts


def loads(args: argparse.Namespace, texts: list[str]) -> list[tuple[str, int, list[Job]]]:
    """(name, concurrency, jobs) of every load."""
    rng = random.Random(args.seed)
    made = [(f"c{c}", c, [Job(t, args.osl) for t in texts]) for c in args.concurrency]
    if args.mixed:
        mixed = [Job(t, rng.randint(*MIXED)) for t in texts]
        made.append(("mixed", max(args.concurrency), mixed))
    return made


def run_load(
    args: argparse.Namespace, target: Target, folder: Path, concurrency: int, jobs: list[Job]
) -> LoadResult:
    if args.client == "aiperf":
        return aiperf_load(AIPERF_VENV, target, folder, concurrency, jobs, args.isl)
    warm = [Job(jobs[0].prompt, 4)] * args.warmup
    if warm:
        drive(target, warm, 1)
    return drive(target, jobs, concurrency)


def ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}x" if b and b == b and a == a else "     -"


def report(results: dict[str, dict[str, Any]], rss: dict[str, int]) -> None:
    rows = (
        ("output tok/s", "output_token_throughput"),
        ("TTFT p50 ms", "ttft_p50_ms"),
        ("TTFT p99 ms", "ttft_p99_ms"),
        ("ITL p50 ms", "itl_p50_ms"),
        ("ITL p99 ms", "itl_p99_ms"),
        ("requests/s", "request_throughput"),
    )
    for load, by_server in results.items():
        print(f"\n== {load}")
        mine, vllm = by_server.get("inferplex"), by_server.get("vllm")
        print(f"  {'':14} {'inferplex':>10} {'vllm':>10} {'ix/vllm':>8}")
        for label, key in rows:
            a = mine[key] if mine else float("nan")
            b = vllm[key] if vllm else float("nan")
            print(f"  {label:14} {a:10.2f} {b:10.2f} {ratio(a, b):>8}")
        static = by_server.get("hf_static")
        if static and mine:
            tok = static["output_token_throughput"]
            print(f"  static batching (HF generate) {tok:8.1f} tok/s; inferplex / static "
                  f"{ratio(mine['output_token_throughput'], tok)}")  # fmt: skip
    print(
        "\npeak RSS (process tree): "
        + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in rss.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/inferplex-llm-bench"))
    parser.add_argument("--install", action="store_true", help="run bench/peers/install_llm.sh")
    parser.add_argument("--client", choices=["native", "aiperf"], default="native")
    parser.add_argument("--servers", nargs="+", default=["inferplex", "vllm"])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=64)
    parser.add_argument("--no-mixed", dest="mixed", action="store_false")
    parser.add_argument("--no-hf", dest="hf", action="store_false")
    parser.add_argument("--threads", type=int, default=1, help="each engine's compute threads")
    parser.add_argument("--kv-cache-bytes", type=int, default=1 << 30)
    parser.add_argument("--small", action="store_true", help="a tiny model: a smoke test")
    parser.add_argument("--seed", type=int, default=1)
    add_results_option(parser)
    args = parser.parse_args()
    if args.install:
        subprocess.run([str(INSTALL)], check=True)
    args.work.mkdir(parents=True, exist_ok=True)
    repository = build_model(args.work, args.small, args.kv_cache_bytes, args.threads)
    folder = repository / MODEL / "1"
    texts = prompts(folder, args.requests, args.isl, args.seed)
    servers: dict[str, tuple[Target, Callable[[], int], PeakRss]] = {}
    results: dict[str, dict[str, Any]] = {}
    rss: dict[str, int] = {}
    try:
        if "inferplex" in args.servers:
            servers["inferplex"] = _start_inferplex(args, repository)
        if "vllm" in args.servers:
            servers["vllm"] = _start_vllm(args, folder)
        for index, (name, concurrency, jobs) in enumerate(loads(args, texts)):
            # alternating: who goes first changes from one load to the next
            order = list(servers) if index % 2 == 0 else list(reversed(servers))
            for server in order:
                target = servers[server][0]
                print(f"{name}: {server} ...", flush=True)
                result = run_load(args, target, folder, concurrency, jobs)
                results.setdefault(name, {})[server] = result.as_dict()
            if args.hf:
                batch = concurrency
                static = hf_static(folder, jobs, batch, args.threads)
                results.setdefault(name, {})["hf_static"] = static.as_dict()
    finally:
        for server, (_, stop, peak) in servers.items():
            rss[server] = peak.stop()
            stop()
    report(results, rss)
    document = {"args": {k: str(v) for k, v in vars(args).items()}, "loads": results, "rss": rss}
    path = result_path("llm_vs_vllm", args.results_dir)
    path.write_text(json.dumps(document, indent=2))
    print(f"\nwrote {path}")


def _start_inferplex(
    args: argparse.Namespace, repository: Path
) -> tuple[Target, Callable[[], int], PeakRss]:
    from inferplex_tools.benchtool.launch import start_server

    server = start_server(repository, args.work / "inferplex.log", deadline=300)
    target = Target(INFERPLEX, f"http://{server.http_url}", MODEL)
    if args.client == "aiperf":
        target = Target(OPENAI, f"http://{server.http_url}", MODEL)
    return target, server.stop, PeakRss(server.process.pid)


def _start_vllm(
    args: argparse.Namespace, folder: Path
) -> tuple[Target, Callable[[], int], PeakRss]:
    python = VLLM_VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no vLLM at {VLLM_VENV}: run with --install (bench/peers/install_llm.sh)")
    process, url = start_vllm(python, folder, args.work / "vllm.log", args.kv_cache_bytes)

    def stop() -> int:
        process.terminate()
        try:
            return process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    try:
        _wait_health(url, process, args.work / "vllm.log")
    except BaseException:
        stop()
        raise
    return Target(OPENAI, url, str(folder)), stop, PeakRss(process.pid)


def _wait_health(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    end = time.monotonic() + 600
    while time.monotonic() < end:
        if process.poll() is not None:
            raise SystemExit(f"vLLM exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise SystemExit(f"vLLM not healthy after 600 s:\n{log.read_text()[-3000:]}")


if __name__ == "__main__":
    main()
