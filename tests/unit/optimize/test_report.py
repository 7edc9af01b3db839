import json
from pathlib import Path

from inferplex_tools.optimize.measure import Agreement, Timing
from inferplex_tools.optimize.promotion import Thresholds
from inferplex_tools.optimize.report import CandidateReport, Report


def timing(batch: int, ms: float) -> Timing:
    return Timing(batch, ms / 1e3, ms * 1.1 / 1e3, 20, (ms / 1e3, ms * 1.2 / 1e3))


def report(promoted: bool) -> Report:
    accuracy = Agreement("logits", 450, 0.999, 0.99, 0.995, 0.97, 0.968)
    faster = CandidateReport(
        name="int8-static-qoperator",
        recipe="static",
        size_bytes=250_000,
        size_ratio=0.25,
        timings={1: (timing(1, 1.0), timing(1, 0.5)), 32: (timing(32, 32.0), timing(32, 12.8))},
        accuracy=accuracy,
        failures=[],
    )
    slower = CandidateReport(
        name="fp16",
        recipe="fp16",
        size_bytes=500_000,
        size_ratio=0.5,
        timings={1: (timing(1, 1.0), timing(1, 2.0)), 32: (timing(32, 32.0), timing(32, 64.0))},
        accuracy=accuracy,
        failures=["slower than FP32 at batch 1: 0.50x the speed"],
    )
    result = Report(
        model="cnn",
        parent_version=1,
        parent_file="cnn/1/model.onnx",
        parent_size_bytes=1_000_000,
        task="classification",
        evaluation="eval.npz, 450 rows, with labels",
        calibration="cal.npz",
        thresholds=Thresholds(),
        machine={"cpu": "test", "cpus": 2, "load_before": 0.5, "load_after": 0.7},
        rounds=7,
        threads=0,
        candidates=[faster, slower] if promoted else [slower],
    )
    if promoted:
        result.promoted, result.new_version = "int8-static-qoperator", 2
    return result


def test_ratios_side_by_side() -> None:
    candidate = report(True).candidates[0]
    assert candidate.speedup(1) == 2.0
    assert candidate.latency_ratio(1) == 0.5
    assert candidate.throughput_ratio(32) == 2.5


def test_json_has_every_figure(tmp_path: Path) -> None:
    paths = report(True).save(tmp_path)
    assert [p.name for p in paths] == ["optimize_report.json", "optimize_report.md"]
    data = json.loads(paths[0].read_text())
    assert data["verdict"] == "promoted: int8-static-qoperator -> cnn version 2"
    speed = data["candidates"][0]["speed"]["32"]
    assert speed["throughput_ratio"] == 2.5 and speed["parent_items_per_s"] == 1000.0
    assert data["candidates"][0]["accuracy"]["accuracy_drop"] == 0.97 - 0.968
    assert data["noise"] == {"1": 0.1818, "32": 0.1818}
    assert data["thresholds"]["min_speedup"] == 1.0


def test_text_and_markdown_say_why_nothing_was_promoted() -> None:
    result = report(False)
    text = result.to_text()
    assert "b1 ms (speedup)" in text and "b32 items/s (ratio)" in text
    assert "accuracy 96.80% (-0.20 pts)" in text  # the change beside the figure
    assert "fp16: fp16; rejected: slower than FP32 at batch 1" in text
    assert text.endswith("not promoted: fp16: slower than FP32 at batch 1: 0.50x the speed")
    markdown = result.to_markdown()
    assert "| fp16 | 0.50 MB | 50.0% | 2.000 | 0.50x | 0.50x |" in markdown
    assert "**not promoted: fp16" in markdown
