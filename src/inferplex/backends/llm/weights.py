"""A model folder's safetensors weights, read into tensors on the engine's device and dtype
(a sharded checkpoint's files all read; no download, no transformers)."""

from __future__ import annotations

from pathlib import Path

import torch

from inferplex.errors import ConfigError


def load_weights(folder: Path, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's ``*.safetensors`` files, by name."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"no *.safetensors weights in {folder}")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        for name, tensor in load_file(str(file), device="cpu").items():
            converted = tensor.to(dtype) if tensor.is_floating_point() else tensor
            weights[name] = converted.to(device)
    return weights


class Weights:
    """Named tensors with the checkpoint's prefix taken off; a missing one is a ConfigError
    naming it (a checkpoint of another shape)."""

    def __init__(self, tensors: dict[str, torch.Tensor], prefixes: tuple[str, ...]) -> None:
        self._tensors: dict[str, torch.Tensor] = {}
        for name, tensor in tensors.items():
            for prefix in prefixes:
                if name.startswith(prefix):
                    name = name[len(prefix) :]
                    break
            self._tensors[name] = tensor

    def get(self, name: str) -> torch.Tensor:
        tensor = self._tensors.get(name)
        if tensor is None:
            raise ConfigError(f"the weights have no tensor '{name}'")
        return tensor

    def optional(self, name: str) -> torch.Tensor | None:
        return self._tensors.get(name)
