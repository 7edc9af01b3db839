"""Where a KIND_AUTO instance group runs: light models on the CPU, heavy ones on a GPU.

On a machine with a GPU, a small model gains little from it (a copy to the device and back
and a kernel launch per layer cost more than its arithmetic) and would take GPU memory and
time from the models that need them. So KIND_AUTO puts a model on the GPU only when it is
*heavy*: when the files of its served version (model file plus external weights in the same
folder) add up to at least ``placement_gpu_min_bytes`` bytes, 20,000,000 unless the model's
parameters say otherwise. Weights dominate a model file, so at 4 bytes per FP32 parameter
the default means about 5 million parameters: a ResNet-18 (45 MB) or a MiniLM (90 MB) goes to
the GPU, an MLP or a small CNN of a few hundred kB stays on the CPU. A group that lists
``gpus`` goes to the GPU whatever its size. Without a GPU everything runs on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from inferplex.config.model_config import InstanceGroup, ModelConfig
from inferplex.errors import ConfigError
from inferplex.repository.local import FileFacts

#: model parameter: the size in bytes from which a KIND_AUTO model counts as heavy
GPU_MIN_BYTES_PARAMETER = "placement_gpu_min_bytes"
DEFAULT_GPU_MIN_BYTES = 20_000_000


def model_bytes(model_file: Path, listed: Sequence[FileFacts] | None = None) -> int:
    """The size of a model version: every file in the model file's folder (ONNX external
    data and weight shards live beside it), or the file alone when it is not in a folder of
    its own. ``listed``: the model folder's files as a load already walked them (their
    sizes are taken from there instead of a second walk)."""
    folder = model_file if model_file.is_dir() else model_file.parent
    if listed is not None:
        return sum(f.size for f in listed if f.path.is_relative_to(folder))
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def auto_kind(
    config: ModelConfig, group: InstanceGroup, size: int, gpu: bool
) -> Literal["KIND_GPU", "KIND_CPU"]:
    """KIND_GPU or KIND_CPU for a KIND_AUTO ``group`` of a model of ``size`` bytes."""
    threshold = gpu_min_bytes(config)  # checked on every machine, not only where a GPU is
    if not gpu:
        return "KIND_CPU"
    if group.gpus:
        return "KIND_GPU"
    return "KIND_GPU" if size >= threshold else "KIND_CPU"


def gpu_min_bytes(config: ModelConfig) -> int:
    value = config.parameters.get(GPU_MIN_BYTES_PARAMETER)
    if value is None:
        return DEFAULT_GPU_MIN_BYTES
    try:
        threshold = int(value)
    except ValueError:
        threshold = -1
    if threshold < 0:
        raise ConfigError(
            f"model '{config.name}': parameter {GPU_MIN_BYTES_PARAMETER} must be a "
            f"non-negative number of bytes, got '{value}'"
        )
    return threshold
