"""Small PyTorch models for the tests, saved as TorchScript (``model.pt``) or as torch.export
programs (``model.pt2``) into a Triton-style repository with their config."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from inferplex.config.writers import write_config


class AddSub(torch.nn.Module):
    """(a, b) -> (a + b, a - b)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


class Named(torch.nn.Module):
    """(a, b) -> {"sum": a + b, "diff": a - b}: outputs answered by dict key."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": a + b, "diff": a - b}


class Identity(torch.nn.Module):
    """x -> a copy of x, for any datatype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone()


class InPlace(torch.nn.Module):
    """x -> x + 1 computed in place, to show inputs are never written through."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(1)


def save_torchscript(module: torch.nn.Module, examples: tuple[Any, ...], path: Path) -> Path:
    """Trace ``module`` on ``examples`` and save it as TorchScript."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # torch.jit is deprecated in favour of torch.export, yet it is Triton's format
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(module.eval(), examples, strict=False)
        traced.save(str(path))
    return path


def save_exported(module: torch.nn.Module, examples: tuple[Any, ...], path: Path) -> Path:
    """Export ``module`` with a variable first (batch) dimension on every input and save it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(
        module.eval(), examples, dynamic_shapes=tuple({0: batch} for _ in examples)
    )
    torch.export.save(program, str(path))
    return path


def tensor(name: str, datatype: str, dims: list[int]) -> dict[str, Any]:
    return {"name": name, "data_type": f"TYPE_{datatype}", "dims": dims}


def write_model(
    repo: Path,
    name: str,
    module: torch.nn.Module,
    examples: tuple[Any, ...],
    inputs: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
    exported: bool = False,
    **fields: Any,
) -> Path:
    """A model folder ``repo/name`` with version 1 and a config.pbtxt; returns the folder."""
    folder = repo / name
    if exported:
        save_exported(module, examples, folder / "1" / "model.pt2")
        fields.setdefault("default_model_filename", "model.pt2")
    else:
        save_torchscript(module, examples, folder / "1" / "model.pt")
    config = {"platform": "pytorch_libtorch", "input": inputs, "output": outputs, **fields}
    write_config(folder, config)
    return folder
