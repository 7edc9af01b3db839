"""The ``model.py`` every model of Triton's repository runs (bench/peers/triton.py copies it
into each version folder): the ``model.onnx`` beside it in ONNX Runtime, inside Triton's
Python backend, which is how a Triton user serves an ONNX file where Triton's own ONNX
Runtime backend cannot be installed. It runs in Triton's backend stub, with the Python of
bench/peers/install.sh's triton-venv (onnxruntime and numpy, no inferplex).

Triton hands ``execute`` a whole dynamic batch as a list of requests: their inputs are
concatenated into one ``session.run`` and the outputs split back per request, as inferplex's
batcher does. The session options are those of inferplex's ONNX Runtime backend
(``inferplex.backends.onnxruntime.session_options``): all cores for one instance, no
spinning between runs, so the comparison measures the serving, not ONNX Runtime's settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnxruntime as ort

if TYPE_CHECKING:  # checked against inferplex's twin of Triton's module, the same API
    from inferplex.handler import triton as pb_utils
else:
    import triton_python_backend_utils as pb_utils


def session_options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        self.inputs = [tensor["name"] for tensor in config["input"]]
        self.outputs = [tensor["name"] for tensor in config["output"]]
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        self.session = ort.InferenceSession(
            str(path), session_options(), providers=["CPUExecutionProvider"]
        )

    def execute(self, requests: list[pb_utils.InferenceRequest]) -> list[Any]:
        parts = {name: [self._input(request, name) for request in requests] for name in self.inputs}
        rows = [len(array) for array in parts[self.inputs[0]]]
        # one request (the unbatched models, c1) runs on its own array, uncopied
        feeds = {
            name: arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
            for name, arrays in parts.items()
        }
        results = self.session.run(self.outputs, feeds)
        ends = np.cumsum(rows)[:-1]
        split = [np.split(result, ends) for result in results]
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(name, pieces[index])
                    for name, pieces in zip(self.outputs, split, strict=True)
                ]
            )
            for index in range(len(requests))
        ]

    @staticmethod
    def _input(request: pb_utils.InferenceRequest, name: str) -> np.ndarray:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        assert tensor is not None, f"no input {name}"  # Triton checked the request's inputs
        return tensor.as_numpy()
