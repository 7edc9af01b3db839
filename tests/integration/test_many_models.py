"""Many light models in one engine: their instances share the worker threads, their sessions
start no threads of their own, and every one of them answers."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import numpy as np
import psutil
import pytest

from examples import modelgen
from inferplex.config.server_config import ServerConfig
from inferplex.config.writers import to_pbtxt
from inferplex.errors import ModelLoadError
from inferplex.lifecycle import manager
from inferplex.server import build_engine
from inferplex.types import InferenceRequest, Tensor

MODELS = 24


def _repository(root: Path) -> Path:
    base = modelgen.add_sub(root / "base")
    config = modelgen.model_config(base, max_batch_size=8, instance_kind="KIND_CPU")
    repo = root / "models"
    for index in range(MODELS):
        name = f"m{index:02d}"
        (repo / name / "1").mkdir(parents=True)
        shutil.copyfile(base, repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(to_pbtxt({**config, "name": name}))
    return repo


def _request(model: str) -> InferenceRequest:
    a = np.ones((1, 16), dtype=np.float32)
    return InferenceRequest(
        model, [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", a.shape, a)]
    )


async def test_light_models_share_a_few_threads(tmp_path: Path) -> None:
    process = psutil.Process()
    before = process.num_threads()
    # every batch goes to a worker thread (none runs on the event loop)
    engine = build_engine(
        ServerConfig(model_repository=_repository(tmp_path), inline_execution_us=0)
    )
    await engine.start()
    try:
        for _ in range(3):
            answers = await asyncio.gather(
                *(engine.infer(_request(f"m{i:02d}")) for i in range(MODELS))
            )
            assert all(a.outputs[0].data.tolist() == [[2.0] * 16] for a in answers)
        added = process.num_threads() - before
    finally:
        await engine.stop()
    # a thread per instance (and one per session's intra-op pool) would add 24 to 48
    assert added <= (os.cpu_count() or 1) + 4, added


async def test_a_start_reads_ahead_and_reports_each_failure_as_a_load_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start the models' files are read in chunks (manager.READ_AHEAD), one trip to a
    thread each: a model whose config is bad fails with the reason a load of it alone gives,
    and the models of every chunk load."""
    monkeypatch.setattr(manager, "READ_AHEAD", 5)
    repo = _repository(tmp_path)
    (repo / "m03" / "config.pbtxt").write_text('name: "m03" max_batch_size: "eight"')
    shutil.rmtree(repo / "m07" / "1")
    config = ServerConfig(model_repository=repo, model_control_mode="explicit", load_model=["*"])
    engine = build_engine(config)
    await engine.start()
    try:
        index = {m["name"]: m for m in engine.repository_index()}
        failed = {n: index[n]["reason"] for n in ("m03", "m07")}
        assert all(index[n]["state"] == "UNAVAILABLE" for n in failed)
        assert [n for n, m in index.items() if m["state"] == "READY"] == [
            f"m{i:02d}" for i in range(MODELS) if i not in (3, 7)
        ]
        for name, reason in failed.items():  # the same model loaded alone
            with pytest.raises(ModelLoadError) as info:
                await engine.load_model(name, {})
            assert info.value.message.endswith(reason), (info.value.message, reason)
    finally:
        await engine.stop()
