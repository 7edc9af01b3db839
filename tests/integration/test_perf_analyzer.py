"""Triton's own perf_analyzer (the binary in the tritonclient wheel) against the real server:
HTTP and gRPC, batched requests, concurrent async requests, BYTES tensors, system shared
memory for inputs and outputs, and sequences of a stateful model (``--sequence-length``).
Each run must finish with a throughput figure and no error; perf_analyzer checks the model's
metadata, config and statistics along the way (../shared/COMPAT.md lists what it reads).

The binary needs libb64 (scripts/system_packages.sh installs it) and CUDA's runtime library
(the nvidia-cuda-runtime-cu12 wheel of the test extra; no GPU is used); where either is
missing the tests skip and say which."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from examples import modelgen
from examples.modelgen import sequences
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import RunningServer, start_server
from tests.support.perf_analyzer import run_perf_analyzer


@pytest.fixture(scope="module")
def perf_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repo = tmp_path_factory.mktemp("perf_repo")
    for path in (modelgen.add_sub(repo), modelgen.identity(repo, "BYTES", name="text")):
        config = modelgen.model_config(path, max_batch_size=8, dynamic_batching=True)
        write_config(path.parent.parent, config)
    sequences.accumulator(repo, "accumulator", strategy="oldest { max_candidate_sequences: 8 }")
    running = start_server(
        repo,
        tmp_path_factory.mktemp("perf_server") / "server.log",
        env={"INFERPLEX_ALLOW_SHARED_MEMORY": "true"},
    )
    yield running
    code = running.stop()
    assert code == 0, f"server exited with {code}:\n{running.log()}"


SHM = ["--shared-memory", "system", "--output-shared-memory-size", "4096"]


@pytest.mark.parametrize(
    ("protocol", "model", "options"),
    [
        ("http", "add_sub", []),
        ("grpc", "add_sub", []),
        ("http", "add_sub", ["-b", "4"]),
        ("grpc", "add_sub", ["--async", "--concurrency-range", "4"]),
        ("http", "add_sub", SHM),
        ("grpc", "add_sub", SHM),
        ("http", "text", ["--string-length", "12", "--shape", "INPUT0:3"]),
        ("grpc", "text", ["--string-length", "12", "--shape", "INPUT0:3"]),
        ("http", "accumulator", ["--sequence-length", "5", "--concurrency-range", "4"]),
        ("grpc", "accumulator", ["--sequence-length", "5", "--concurrency-range", "4"]),
        ("grpc", "accumulator", ["--sequence-length", "5", "--streaming"]),
    ],
    ids=["http", "grpc", "http-batch4", "grpc-async-c4", "http-shm", "grpc-shm",
         "http-bytes", "grpc-bytes", "http-sequences", "grpc-sequences", "stream-sequences"],
)  # fmt: skip
def test_perf_analyzer_measures_the_server(
    perf_server: RunningServer, protocol: str, model: str, options: list[str]
) -> None:
    url = perf_server.http_url if protocol == "http" else perf_server.grpc_url
    run_perf_analyzer(model, url, protocol, options)
