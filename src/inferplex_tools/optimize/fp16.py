"""FP16: weights and arithmetic in half precision, inputs and outputs kept FP32 so the
served signature (and the model's config) does not change."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnxruntime.transformers.float16 import convert_float_to_float16


def convert_fp16(source: Path, target: Path) -> None:
    """Write an FP16 copy of ``source`` with FP32 inputs and outputs (Cast nodes at the edges).

    On CPUs, ONNX Runtime has few FP16 kernels and inserts casts around the others: expect it
    to be slower than FP32 there; the optimiser measures it and says so."""
    model = onnx.load(str(source))
    converted = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)
    onnx.save(converted, str(target))
