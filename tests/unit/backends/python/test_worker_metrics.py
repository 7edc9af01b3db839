"""A real worker's custom metrics reach the server's table: what initialize made (with
"ready") and what a batch changed (with its answer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferplex.backends.base import InstanceSpec
from inferplex.backends.python import PythonBackend
from inferplex.backends.worker.model_metrics import MODEL_METRICS
from inferplex.config.model_config import ModelConfig

COUNTING = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily("unit_rows", "Rows seen", pb_utils.MetricFamily.COUNTER)
        self.rows = family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.rows.increment(len(x))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def rows_seen() -> dict[tuple[tuple[str, str], ...], object]:
    family = next((f for f in MODEL_METRICS.families() if f.name == "unit_rows"), None)
    return {} if family is None else family.values


def test_metrics_travel_with_ready_and_with_each_answer(tmp_path: Path) -> None:
    model_file = tmp_path / "counting" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text(COUNTING)
    config = ModelConfig.model_validate(
        {
            "name": "counting",
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "FP32", "dims": [2]}],
            "output": [{"name": "OUTPUT0", "data_type": "FP32", "dims": [2]}],
        }
    )
    labels = (("model", "counting"),)
    backend = PythonBackend(model_file, config, InstanceSpec())
    try:
        before = rows_seen().get(labels, 0.0)
        assert labels in rows_seen()  # made in initialize: shown once loaded
        backend.execute({"INPUT0": np.zeros((3, 2), np.float32)}, ["OUTPUT0"])
        assert rows_seen()[labels] == before + 3
        backend.execute({"INPUT0": np.zeros((2, 2), np.float32)}, ["OUTPUT0"])
        assert rows_seen()[labels] == before + 5
    finally:
        backend.close()
