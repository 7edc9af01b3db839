"""Model repositories for the lifecycle tests and benchmark: add_sub models with versions
(a response names the version that served it), and helpers that change them on disk."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from examples import modelgen
from inferplex.config.writers import write_config
from inferplex.types import InferenceRequest, Tensor


def add_sub_config(repo: Path, name: str = "add_sub", **extra: Any) -> dict[str, Any]:
    """add_sub's config (max_batch_size 8, dynamic batching) with ``extra`` fields."""
    model = next((repo / name).glob("*/model.onnx"))
    config = modelgen.model_config(model, max_batch_size=8, dynamic_batching=True)
    config.update(extra)
    return config


def add_model(
    repo: Path, name: str = "add_sub", versions: tuple[int, ...] = (1,), **extra: Any
) -> Path:
    """An add_sub model with the given versions and config (``extra`` config fields)."""
    for version in versions:
        modelgen.add_sub(repo, name=name, version=version)
    write_config(repo / name, add_sub_config(repo, name, **extra))
    return repo / name


def add_version(repo: Path, version: int, name: str = "add_sub") -> None:
    """Write (or rewrite) a version; its files get a new modification time either way."""
    path = modelgen.add_sub(repo, name=name, version=version)
    _touch_later(path)


def break_version(repo: Path, version: int, name: str = "add_sub") -> None:
    """A version whose model file is not a model."""
    folder = repo / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(b"not an onnx model")


def remove_version(repo: Path, version: int, name: str = "add_sub") -> None:
    shutil.rmtree(repo / name / str(version))


def _touch_later(path: Path) -> None:
    # a rewrite within the file system's timestamp granularity must still look changed
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, max(stat.st_mtime_ns, time.time_ns()) + 1_000_000))


def add_sub_request(model: str = "add_sub", version: str = "", rows: int = 1) -> InferenceRequest:
    a = np.arange(16 * rows, dtype=np.float32).reshape(rows, 16)
    b = np.ones((rows, 16), dtype=np.float32)
    return InferenceRequest(
        model,
        [Tensor("INPUT0", "FP32", a.shape, a), Tensor("INPUT1", "FP32", b.shape, b)],
        model_version=version,
    )


def wait_until(condition: Callable[[], bool], deadline: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it holds (blocking; for tests outside the event loop)."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"not reached within {deadline} s: {what}")
        time.sleep(0.02)


async def eventually(condition: Callable[[], bool], deadline: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it holds (for async tests: the event loop keeps running)."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError(f"not reached within {deadline} s: {what}")
        await asyncio.sleep(0.02)
