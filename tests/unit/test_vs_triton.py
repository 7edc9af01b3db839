"""The pure parts of bench/vs_triton.py and bench/peers: reading perf_analyzer's CSV, its
command line, the models' configs on both servers, medians, ratios and targets. The benchmark
itself (Triton, perf_analyzer, timings) is not run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.peers.models import MODELS, build, shape_options
from bench.peers.perf_analyzer import QUICK, Figures, Settings, command, parse_csv
from bench.peers.triton import MODEL_PY, triton_repository
from bench.report import check_targets
from bench.vs_triton import CASES, TARGETS, Case, chosen_cases, medians
from inferplex_tools.benchtool import BenchError

#: what perf_analyzer 2.51 wrote with -f for add_sub at concurrency 1 (latencies in µs)
CSV = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency\n"
    "1,1256.85,45,147,319,14,216,49,0,705,869,1175,2295\n"
)


def test_parse_csv_reads_throughput_and_latencies_in_ms() -> None:
    assert parse_csv(CSV) == (1256.85, 0.705, 2.295)


@pytest.mark.parametrize("text", ["", "Concurrency,Inferences/Second\n32,100\n"])
def test_parse_csv_without_the_figures_fails(text: str) -> None:
    with pytest.raises(BenchError, match="p50 latency"):
        parse_csv(text)


def test_command_sends_zeros_with_the_settings_and_extra_options() -> None:
    args = command(
        Path("/pa"),
        "mlp",
        "127.0.0.1:8001",
        "grpc",
        32,
        Settings(window_ms=2500, stability=25, max_trials=8),
        Path("/tmp/run.csv"),
        ["--shape=features:1,256"],
    )
    assert args[:7] == ["/pa", "-m", "mlp", "-u", "127.0.0.1:8001", "-i", "grpc"]
    joined = " ".join(args)
    assert "--concurrency-range 32 --input-data zero" in joined
    assert "--measurement-interval 2500 --stability-percentage 25 --max-trials 8" in joined
    assert args[-3:] == ["--shape=features:1,256", "-f", "/tmp/run.csv"]
    assert QUICK.window_ms < Settings().window_ms


def test_unbatched_copies_run_each_request_alone_and_get_shapes(tmp_path: Path) -> None:
    built = build(tmp_path, [MODELS["add_sub"], MODELS["add_sub_unbatched"]], 200)
    batched, alone = built["add_sub"].config, built["add_sub_unbatched"].config
    assert batched["max_batch_size"] == 64
    assert batched["dynamic_batching"] == {"max_queue_delay_microseconds": 200}
    assert batched["instance_group"] == [{"kind": "KIND_CPU", "count": 1}]
    # max_batch_size 0: inferplex would give a batchable ONNX model dynamic_batching {}
    assert alone["max_batch_size"] == 0 and "dynamic_batching" not in alone
    assert shape_options(built["add_sub"].path, batched=True) == []
    assert shape_options(built["add_sub_unbatched"].path, batched=False) == [
        "--shape=INPUT0:1,16",
        "--shape=INPUT1:1,16",
    ]


def test_triton_repository_serves_the_same_file_and_config_in_the_python_backend(
    tmp_path: Path,
) -> None:
    built = build(tmp_path / "onnx", [MODELS["add_sub"]], 200)
    repo = triton_repository(built, tmp_path / "triton")
    config = (repo / "add_sub" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "platform" not in config
    assert "max_queue_delay_microseconds: 200" in config and "max_batch_size: 64" in config
    version = repo / "add_sub" / "1"
    assert (version / "model.py").read_text() == MODEL_PY.read_text()
    assert (version / "model.onnx").resolve() == built["add_sub"].path.resolve()


def test_case_keys_and_the_model_each_server_runs() -> None:
    c1 = Case("add_sub", "http", 1, triton_model="add_sub_unbatched")
    assert c1.key == "add_sub/http/c1"
    assert (c1.served("inferplex"), c1.served("triton")) == ("add_sub", "add_sub_unbatched")
    assert Case("mlp", "grpc", 32).served("triton") == "mlp"
    assert len({case.key for case in CASES}) == len(CASES)
    assert chosen_cases("") == list(CASES)
    assert [c.key for c in chosen_cases("add_sub/http/c1,mlp/grpc/c32")] == [
        "add_sub/http/c1",
        "mlp/grpc/c32",
    ]
    with pytest.raises(SystemExit, match="unknown cases"):
        chosen_cases("mlp/grpc/c1")


def figures(rate: float, p50: float = 1.0, cpu: float = 100.0) -> Figures:
    return Figures(rate=rate, p50_ms=p50, p99_ms=2 * p50, server_cpu_us=cpu, client_cpu_us=50.0)


def test_medians_ratios_and_targets() -> None:
    runs = {
        "mlp/grpc/c32": {
            "inferplex": [figures(4000, cpu=60), figures(3000, cpu=80), figures(5000, cpu=70)],
            "triton": [figures(2000, cpu=200), figures(2000, cpu=200), figures(2000, cpu=200)],
        },
        "mlp_unbatched/grpc/c32": {
            "inferplex": [figures(1000)] * 3,
            "triton": [figures(800)] * 3,
        },
        "add_sub/http/c1": {
            "inferplex": [figures(2000, p50=0.5)] * 3,
            "triton": [figures(2000, p50=0.5)] * 3,
        },
    }
    flat = medians(runs)
    assert flat["inferplex/mlp/grpc/c32/rate"] == 4000
    assert flat["inferplex/mlp/grpc/c32/server_cpu_us"] == 70
    assert flat["inferplex/mlp/grpc/c32/rates"] == [4000, 3000, 5000]
    assert flat["mlp/grpc/c32/ratio/rate"] == 2.0
    assert flat["mlp/grpc/c32/ratio/server_cpu_us"] == 0.35
    assert flat["inferplex/mlp/grpc/c32/batching"] == 4.0
    assert flat["triton/mlp/grpc/c32/batching"] == 2.5
    outcomes = {o["target"]: o["pass"] for o in check_targets(TARGETS, flat)}
    assert outcomes == {
        "MLP c32 items/s batched / unbatched, inferplex, gRPC": True,
        "MLP c32 items/s batched / unbatched, inferplex, HTTP": False,  # not measured
        "MLP c32 server CPU per request / Triton, gRPC": True,
        "MLP c32 server CPU per request / Triton, HTTP": False,
        "add_sub c1 p50 / Triton unbatched, HTTP": False,  # 1.0 > 0.9
    }


def test_a_server_without_a_stable_run_gets_no_ratio() -> None:
    flat = medians({"add_sub/http/c1": {"inferplex": [figures(2000)], "triton": []}})
    assert flat["inferplex/add_sub/http/c1/rate"] == 2000
    assert "triton/add_sub/http/c1/rate" not in flat
    assert "add_sub/http/c1/ratio/rate" not in flat
