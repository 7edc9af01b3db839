"""Model warm-up (Triton's ``model_warmup``): sample requests run through a freshly loaded
version — the real path: validation, queue, instance, backend — before it is marked ready,
so the first real request does not pay for lazy allocations and kernel selection.

Each sample's data is zeros, random values, or a raw file from ``<model>/warmup/`` (Triton's
layout: little-endian values, BYTES elements as 4-byte length + bytes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferplex.config.model_config import ModelConfig, ModelWarmup, WarmupInput
from inferplex.core.model import ModelVersion
from inferplex.datatypes import element_count, numpy_dtype
from inferplex.errors import ConfigError, InferplexError, ModelLoadError
from inferplex.lifecycle.data_files import read_tensor_file
from inferplex.types import InferenceRequest, Tensor

#: folder of a model holding the files that ``input_data_file`` names
WARMUP_FOLDER = "warmup"


def warmup_requests(config: ModelConfig, model_dir: Path) -> list[InferenceRequest]:
    """The requests of every sample, each repeated ``count`` times (at least once).
    ConfigError naming the sample when its data cannot be made. Blocking (reads files)."""
    requests: list[InferenceRequest] = []
    rng = np.random.default_rng(0)
    for index, sample in enumerate(config.model_warmup):
        label = sample.name or f"model_warmup[{index}]"
        if config.batched and not 1 <= sample.batch_size <= config.max_batch_size:
            raise ConfigError(
                f"model '{config.name}': warm-up sample '{label}' has batch_size "
                f"{sample.batch_size}, expected 1 to max_batch_size {config.max_batch_size}"
            )
        inputs = [
            _tensor(name, item, sample, config, model_dir, rng, label)
            for name, item in sample.inputs.items()
        ]
        request = InferenceRequest(config.name, inputs, id=f"warmup:{label}")
        requests.extend([request] * max(1, sample.count))
    return requests


def _tensor(
    name: str,
    item: WarmupInput,
    sample: ModelWarmup,
    config: ModelConfig,
    model_dir: Path,
    rng: np.random.Generator,
    label: str,
) -> Tensor:
    shape = (sample.batch_size, *item.dims) if config.batched else tuple(item.dims)
    if item.input_data_file:
        what = f"model '{config.name}': warm-up sample '{label}' input '{name}': input_data_file"
        data = read_tensor_file(
            model_dir, WARMUP_FOLDER, item.input_data_file, what, item.data_type, shape
        )
        return Tensor(name, item.data_type, shape, data)
    if item.data_type == "BYTES":
        # zero data is empty strings; random data is short random byte strings
        count = element_count(shape)
        data = np.array(
            [b"" if item.zero_data else rng.bytes(8) for _ in range(count)], dtype=object
        )
        return Tensor(name, "BYTES", shape, data.reshape(shape))
    dtype = numpy_dtype(item.data_type)
    if item.zero_data:
        array = np.zeros(shape, dtype=dtype)
    elif dtype.kind == "f":
        array = rng.random(shape).astype(dtype)
    elif dtype.kind == "b":
        array = rng.integers(0, 2, shape).astype(dtype)
    else:
        array = rng.integers(0, 100, shape).astype(dtype)
    return Tensor(name, item.data_type, shape, array)


async def run_warmup(served: ModelVersion, requests: list[InferenceRequest]) -> None:
    """Run the warm-up requests on ``served``, one after the other (as Triton does);
    ModelLoadError naming the sample when one fails."""
    for request in requests:
        try:
            await served.infer(request)
        except InferplexError as exc:
            raise ModelLoadError(
                f"warm-up sample '{request.id.removeprefix('warmup:')}' failed on version "
                f"{served.version}: {exc.message}"
            ) from None
