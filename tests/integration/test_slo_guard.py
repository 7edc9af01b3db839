"""The ``adaptive`` policy's SLO guard in a real engine: a model missing its latency target has
the batches of a model without one paced, and the dispatcher still starts every paced batch."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pytest

from examples import modelgen
from inferplex import InferenceRequest, ServerConfig, Tensor
from inferplex.config.writers import write_config
from inferplex.server import build_engine


def write_models(repo: Path) -> None:
    """``urgent``: add_sub with a 1 µs target, which every request misses; ``bulk``: about
    20 ms per request, no target, one instance."""
    urgent = modelgen.model_config(modelgen.add_sub(repo, "urgent"), max_batch_size=8)
    urgent["dynamic_batching"] = {}
    urgent["scheduling"] = {"weight": 8, "slo_p99_ms": 0.001}
    write_config(repo / "urgent", urgent)
    write_config(repo / "bulk", modelgen.model_config(modelgen.slow(repo, "bulk", seconds=0.02)))


def urgent_request() -> InferenceRequest:
    data = np.ones((1, 16), dtype=np.float32)
    return InferenceRequest(
        "urgent",
        [Tensor("INPUT0", "FP32", data.shape, data), Tensor("INPUT1", "FP32", data.shape, data)],
    )


def bulk_request() -> InferenceRequest:
    data = np.zeros(1, dtype=np.float32)
    return InferenceRequest("bulk", [Tensor("INPUT0", "FP32", data.shape, data)])


async def test_a_missed_target_paces_the_model_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_models(tmp_path)
    config = ServerConfig(
        model_repository=tmp_path, scheduling_policy="adaptive", max_concurrent_batches=2
    )
    engine = build_engine(config)
    await engine.start()
    try:
        assert engine.dispatcher is not None
        scheduler = engine.dispatcher.scheduler
        pick = scheduler.pick
        paced: list[float] = []  # when a ready bulk batch was refused with a slot free

        def spy(candidates: Collection[str], now: float) -> str | None:
            key = pick(candidates, now)
            if key is None and scheduler.running < scheduler.slots:
                paced.extend(now for k in candidates if k.startswith("bulk"))
            return key

        monkeypatch.setattr(scheduler, "pick", spy)
        assert scheduler.untargeted_share == 1.0
        await engine.infer(urgent_request())
        assert scheduler.untargeted_share == 0.5  # missed: bulk may use half its capacity

        answers = await asyncio.wait_for(
            asyncio.gather(*(engine.infer(bulk_request()) for _ in range(4))), 60
        )
        assert [a.model_name for a in answers] == ["bulk"] * 4  # each paced batch started
        assert paced  # and between them the guard held bulk back with a slot free
    finally:
        await engine.stop()
