"""Offline graph optimisation: ONNX Runtime's optimisers (constant folding, redundant node
removal, operator fusions) run once and the result is saved, so a session does not redo them at
every load."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort


def optimize_graph(source: Path, target: Path, extended: bool = True) -> None:
    """Save the graph as ONNX Runtime's CPU provider optimises it.

    At the extended level (the default) the fusions (FusedConv, SkipLayerNormalization, ...)
    are contrib ops of ONNX Runtime: the result runs on ONNX Runtime only. The basic level
    keeps standard ONNX ops (constant folding, redundant nodes removed, Conv+BatchNorm
    folded). The "all" level is never saved: its layout changes are specific to the machine
    that ran them."""
    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if extended
        else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    )
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
