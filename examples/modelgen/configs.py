"""A model file's signature, and a Triton-style config dict that matches it (written by
``inferplex.config.writers.write_config``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from examples.modelgen.onnxfile import ONNX_TO_V2
from inferplex.datatypes import V2_TO_TRITON

PLATFORM = "onnxruntime_onnx"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as the model file declares it: V2 datatype and full shape (-1 = variable)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def signature(model_path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The inputs and outputs an ONNX file declares, batch dimension included."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {t.name for t in graph.initializer}

    def spec(value: onnx.ValueInfoProto) -> TensorSpec:
        tensor_type = value.type.tensor_type
        shape = tuple(d.dim_value if d.dim_value > 0 else -1 for d in tensor_type.shape.dim)
        return TensorSpec(value.name, ONNX_TO_V2[tensor_type.elem_type], shape)

    inputs = [spec(v) for v in graph.input if v.name not in initializers]
    return inputs, [spec(v) for v in graph.output]


def model_config(
    model_path: Path,
    *,
    name: str = "",
    max_batch_size: int = 0,
    instance_kind: str = "",
    instance_count: int = 1,
    dynamic_batching: bool = False,
) -> dict[str, Any]:
    """A Triton-style config dict (Triton's field names) matching the model file.

    ``name`` defaults to the model folder (``<repo>/<name>/<version>/model.onnx``). With
    ``max_batch_size > 0`` the first dimension of every tensor is the batch dimension and
    is left out of ``dims``, as Triton does; it must be variable (-1) in the model. A tensor
    with nothing left (one value per batch item) gets Triton's ``dims: [1]`` and
    ``reshape: { shape: [] }``.
    """
    name = name or model_path.parent.parent.name
    inputs, outputs = signature(model_path)

    def tensor(spec: TensorSpec) -> dict[str, Any]:
        dims = spec.shape
        if max_batch_size > 0:
            if not dims or dims[0] != -1:
                raise ValueError(
                    f"{name}: tensor '{spec.name}' has shape {list(dims)}; batching needs a "
                    "variable (-1) first dimension"
                )
            dims = dims[1:]
        out: dict[str, Any] = {
            "name": spec.name,
            "data_type": V2_TO_TRITON[spec.datatype],
            "dims": list(dims),
        }
        if not dims:
            # Triton wants non-empty dims: one value per batch item is dims [1] reshaped to [].
            out.update(dims=[1], reshape={"shape": []})
        return out

    config: dict[str, Any] = {
        "name": name,
        "platform": PLATFORM,
        "max_batch_size": max_batch_size,
        "input": [tensor(t) for t in inputs],
        "output": [tensor(t) for t in outputs],
    }
    if instance_kind:
        config["instance_group"] = [{"kind": instance_kind, "count": instance_count}]
    if dynamic_batching:
        config["dynamic_batching"] = {}
    return config
