"""The models both servers serve in bench/vs_triton.py, built with the project's own model
scripts and configured alike for both, one CPU instance each: batched, ``max_batch_size`` 64
and ``dynamic_batching { max_queue_delay_microseconds: D }``; or, the ``_unbatched`` copies,
``max_batch_size: 0``, so that each request runs alone (inferplex, as Triton's ONNX Runtime
backend, gives an ONNX model that can batch ``dynamic_batching {}`` when its config has none;
Triton's Python backend does not).

- ``add_sub``: ``examples.modelgen.add_sub``, FP32 ``INPUT0``/``INPUT1`` ``[-1, 16]``, the
  model that does nothing, so every microsecond is the server's.
- ``mlp``: ``examples.modelgen.mlp``, FP32 ``features`` 256 -> 1024 -> 1024 -> ``logits`` 10
  (Gemm + Relu, seeded weights), where batching pays: in-process a batch of 16 runs about 5x
  the rows per second of batch 1.
- ``resnet18``: ``examples.export_cnns.resnet18`` (torch), FP32 ``image`` 3x224x224, seeded
  random weights: compute-bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.serving import Layout, write_model
from examples import modelgen

#: what perf_analyzer may send in one request, and what a dynamic batch may hold
MAX_BATCH_SIZE = 64


def _resnet18(repo: Path, name: str) -> Path:
    from examples.export_cnns import resnet18  # imports torch: only when asked for

    return resnet18(repo, name)


#: the ONNX model of each source, written as ``<repo>/<name>/1/model.onnx``
BUILDERS: dict[str, Callable[[Path, str], Path]] = {
    "add_sub": lambda repo, name: modelgen.add_sub(repo, name),
    "mlp": partial(modelgen.mlp, features=256, hidden=(1024, 1024), classes=10),
    "resnet18": _resnet18,
}


@dataclass(frozen=True)
class Model:
    """A served model: its name, the ONNX model it serves and whether requests are batched."""

    name: str
    source: str
    batched: bool


MODELS = {
    model.name: model
    for model in (
        Model("add_sub", "add_sub", batched=True),
        Model("add_sub_unbatched", "add_sub", batched=False),
        Model("mlp", "mlp", batched=True),
        Model("mlp_unbatched", "mlp", batched=False),
        Model("resnet18", "resnet18", batched=True),
    )
}


@dataclass(frozen=True)
class Built:
    """A model written into a repository: its ONNX file and its config (Triton's names)."""

    path: Path
    config: Mapping[str, Any]


def build(repo: Path, models: Sequence[Model], queue_delay_us: int) -> dict[str, Built]:
    """Write ``models`` with their ``config.pbtxt`` into ``repo``, as inferplex serves them."""
    built = {}
    for model in models:
        path = BUILDERS[model.source](repo, model.name)
        if model.batched:
            batching = {"max_queue_delay_microseconds": queue_delay_us}
            layout = Layout(max_batch_size=MAX_BATCH_SIZE, batching=batching)
        else:
            layout = Layout(max_batch_size=0, batching=None)
        config = write_model(path, layout)
        built[model.name] = Built(path, config)
    return built


def sample_inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """One request's inputs for the model file at ``path`` (batch of 1, seeded values), for
    checking what a server answers."""
    rng = np.random.default_rng(seed)
    inputs, _ = modelgen.signature(path)
    return {spec.name: rng.random([1, *spec.shape[1:]], dtype=np.float32) for spec in inputs}


def shape_options(path: Path, batched: bool) -> list[str]:
    """perf_analyzer's ``--shape`` for each input of an unbatched model (its config keeps
    the model's variable first dimension), so it sends one row per request as to the batched
    model; nothing for a batched one."""
    if batched:
        return []
    inputs, _ = modelgen.signature(path)
    return [f"--shape={spec.name}:{','.join(map(str, (1, *spec.shape[1:])))}" for spec in inputs]
