"""Per-model series from recorded scrapes, and the rendered PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplex_tools.heatmap.render import render
from inferplex_tools.heatmap.series import HeatmapError, build, read_scrapes, shares


def _line(time: float, compute_us: dict[str, float], success: dict[str, float]) -> str:
    samples = []
    for model, value in compute_us.items():
        labels = {"model": model, "version": "1"}
        samples.append(["nv_inference_compute_infer_duration_us", labels, value])
        samples.append(["nv_inference_request_success", labels, success[model]])
    samples.append(["process_resident_memory_bytes", {}, 1e8])  # no model label: ignored
    samples.append(["inferplex_model_memory_bytes", {"model": "a", "version": "1"}, 2**21])
    return json.dumps({"time": time, "samples": samples})


def _write(tmp_path: Path) -> Path:
    lines = [
        _line(100.0, {"a": 0, "b": 0}, {"a": 0, "b": 0}),
        _line(101.0, {"a": 500_000, "b": 0}, {"a": 10, "b": 0}),
        # the server restarted: b's counters start again from zero
        _line(103.0, {"a": 1_500_000, "b": 250_000}, {"a": 30, "b": 5}),
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_compute_requests_and_memory_per_interval(tmp_path: Path) -> None:
    series = build(read_scrapes(_write(tmp_path)))
    assert series.edges == [0.0, 1.0, 3.0]
    compute, requests, memory = series.panels
    assert compute.models == ["a", "b"]
    assert compute.values == [[0.5, 0.5], [0.0, 0.125]]  # cores busy
    assert requests.values == [[10.0, 10.0], [0.0, 2.5]]
    assert memory.values[0] == [2.0, 2.0]  # MiB
    assert shares(compute) == pytest.approx({"a": 1.0 / 1.125, "b": 0.125 / 1.125})


def test_a_counter_reset_counts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        _line(0, {"a": 900_000}, {"a": 90}) + "\n" + _line(1, {"a": 100_000}, {"a": 10}) + "\n"
    )
    series = build(read_scrapes(path))
    assert series.panels[0].values == [[0.1]]
    assert series.panels[1].values == [[10.0]]


def test_render_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "heat.png"
    render(build(read_scrapes(_write(tmp_path))), out)
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and out.stat().st_size > 5000


def test_bad_input_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"time": 1}\n')
    with pytest.raises(HeatmapError, match=r"bad\.jsonl:1"):
        read_scrapes(path)
    path.write_text(_line(0, {"a": 0}, {"a": 0}) + "\n")
    with pytest.raises(HeatmapError, match="at least 2 scrapes"):
        build(read_scrapes(path))
