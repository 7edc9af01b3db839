"""`inferplex optimize` end to end: a small conv model promoted to a new version that the
server then serves, and a tiny MLP that is not promoted (no version written).

Promotion depends on measured speed, which tests never assert on: the conv run sets
--min-speedup 0 (any speed passes) and the MLP run sets a bar no variant can reach, so each
outcome is fixed and the test checks what the command does with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import requests

from examples import modelgen
from examples.modelgen import onnxfile
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import start_server

IMAGE = 16
QUICK = ["--rounds", "2", "--round-seconds", "0.02", "--batch-size", "8", "--threads", "1"]


def run_optimize(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inferplex", "optimize", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_conv_model_is_promoted_and_served(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    path = modelgen.small_cnn(repo, name="cnn", image_size=IMAGE, widths=(8, 16))
    write_config(repo / "cnn", modelgen.model_config(path, max_batch_size=8))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", image=rng.random((32, 3, IMAGE, IMAGE), dtype=np.float32))
    np.savez(tmp_path / "eval.npz", image=rng.random((16, 3, IMAGE, IMAGE), dtype=np.float32))

    result = run_optimize(
        "--model-repository", str(repo), "--model", "cnn", "--int8",
        "--calibration", str(tmp_path / "cal.npz"), "--eval", str(tmp_path / "eval.npz"),
        "--task", "embedding", "--min-cosine", "0.9", "--min-speedup", "0", *QUICK,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "int8-static-qoperator" in result.stdout
    assert "promoted: int8-static-qoperator -> cnn version 2" in result.stdout
    report = json.loads((repo / "cnn" / "2" / "optimize_report.json").read_text())
    assert report["new_version"] == 2 and report["parent_version"] == 1
    (candidate,) = report["candidates"]
    assert candidate["size_ratio"] < 1
    assert set(candidate["speed"]) == {"1", "8"}
    assert candidate["accuracy"]["cosine_mean"] >= 0.9
    assert (repo / "cnn" / "2" / "optimize_report.md").is_file()
    assert not list((repo / "cnn").glob(".optimize-*"))

    server = start_server(repo, tmp_path / "server.log")
    try:
        image = rng.random((1, 3, IMAGE, IMAGE), dtype=np.float32)
        body = {
            "inputs": [
                {"name": "image", "datatype": "FP32", "shape": [1, 3, IMAGE, IMAGE],
                 "data": image.ravel().tolist()}
            ]
        }  # fmt: skip
        url = f"http://{server.http_url}/v2/models/cnn/versions/2/infer"
        response = requests.post(url, json=body, timeout=30)
        assert response.status_code == 200, response.text
        (output,) = response.json()["outputs"]
        assert output["name"] == "logits" and output["shape"] == [1, 10]
        parent = onnxfile.session(path).run(None, {"image": image})[0]
        assert np.allclose(output["data"], parent.ravel(), atol=0.25 * np.abs(parent).max())
    finally:
        assert server.stop() == 0, server.log()


def test_tiny_mlp_is_not_promoted(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    modelgen.mlp(repo, name="mlp", features=16, hidden=(32, 32))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "eval.npz", features=rng.standard_normal((64, 16)).astype(np.float32))

    result = run_optimize(
        "--model-repository", str(repo), "--model", "mlp", "--int8", "--fp16",
        "--eval", str(tmp_path / "eval.npz"), "--task", "classification",
        "--min-speedup", "1000", *QUICK,
    )  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    assert "MatMul-heavy graph" in result.stdout
    assert "not promoted: int8-dynamic: " in result.stdout
    assert "than FP32 at batch 8" in result.stdout  # "slower than" or "not enough faster than"
    assert sorted(p.name for p in (repo / "mlp").iterdir()) == [
        "1",
        "optimize_report.json",
        "optimize_report.md",
    ]
    report = json.loads((repo / "mlp" / "optimize_report.json").read_text())
    assert report["promoted"] is None and report["task"] == "classification"
    assert [c["name"] for c in report["candidates"]] == ["int8-dynamic", "fp16"]
    int8, _ = report["candidates"]
    assert int8["size_ratio"] < 0.8  # the Gemm layers were quantised (tiny: scales weigh)
    for candidate in report["candidates"]:
        assert candidate["accuracy"]["top1_agreement"] > 0.8
        assert any("needed >= 1000.00x" in f for f in candidate["failures"])


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    modelgen.small_cnn(repo, name="cnn", image_size=IMAGE, widths=(4,))
    result = run_optimize("--model-repository", str(repo), "--model", "cnn", "--int8")
    assert result.returncode == 2
    assert "static quantisation needs a calibration set" in result.stderr
    result = run_optimize("--model-repository", str(repo), "--model", "nope", "--int8")
    assert result.returncode == 2 and "no model 'nope'" in result.stderr
    result = run_optimize("--model-repository", str(repo), "--model", "cnn")
    assert result.returncode == 2 and "nothing to do" in result.stderr
