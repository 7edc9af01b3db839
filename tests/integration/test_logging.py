"""Structured logs of a real server: JSON lines, one per model state change, none per request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex_tools.benchtool.launch import start_server


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("logging-repo")
    path = modelgen.add_sub(repo)
    write_config(repo / "add_sub", modelgen.model_config(path, max_batch_size=8))
    modelgen.add_sub(repo, name="broken")
    (repo / "broken" / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: -1\n')
    return repo


def records(log: str) -> list[dict[str, Any]]:
    lines = [line for line in log.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON log line: {line!r}")
    return parsed


def test_json_lines_one_per_state_change_and_none_per_request(
    repository: Path, tmp_path: Path
) -> None:
    server = start_server(
        repository,
        tmp_path / "server.log",
        env={"INFERPLEX_LOG_FORMAT": "json", "INFERPLEX_LOG_LEVEL": "info"},
    )
    try:
        before = len(records(server.log()))
        client = httpclient.InferenceServerClient(server.http_url)
        a = np.ones((1, 16), dtype=np.float32)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        for _ in range(30):
            client.infer("add_sub", inputs)
        with pytest.raises(httpclient.InferenceServerException):
            client.infer("broken", inputs)
        client.close()
        assert len(records(server.log())) == before, "requests were logged"
    finally:
        assert server.stop() == 0
    logged = records(server.log())
    for record in logged:
        assert {"time", "level", "logger", "message"} <= record.keys()
    states = {
        model: [r["state"] for r in logged if r.get("model") == model]
        for model in ("add_sub", "broken")
    }
    assert states["add_sub"] == ["LOADING", "READY", "UNLOADING", "UNAVAILABLE"]
    assert states["broken"] == ["LOADING", "UNAVAILABLE"]
    (failed,) = (r for r in logged if r.get("model") == "broken" and r["state"] == "UNAVAILABLE")
    assert failed["level"] == "ERROR" and "max_batch_size" in failed["message"]
