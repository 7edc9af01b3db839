"""An ``async def execute`` in a real worker process: its gathered ``async_exec`` calls reach
the server in one message and are all started before any is waited for."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from inferplex.backends.base import InstanceSpec
from inferplex.backends.python import PythonBackend
from inferplex.config.model_config import ModelConfig
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

ASYNC_MODEL = """
import asyncio
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            calls = [
                pb_utils.InferenceRequest(
                    model_name=name, inputs=[x], requested_output_names=["Y"], timeout=20_000_000
                ).async_exec()
                for name in ("first", "second")
            ]
            answers = await asyncio.gather(*calls)
            for answer in answers:
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            y = sum(pb_utils.get_output_tensor_by_name(a, "Y").as_numpy() for a in answers)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
"""


class BothOrNone:
    """A caller that answers no call until two have been submitted: a server waiting for
    the first call before starting the second would wait until the calls' timeout."""

    def __init__(self) -> None:
        self.submitted: list[tuple[InferenceRequest, Future[InferenceResponse]]] = []
        self._lock = threading.Lock()

    def submit(self, request: InferenceRequest, precedence: int = 0) -> Future[InferenceResponse]:
        future: Future[InferenceResponse] = Future()
        with self._lock:
            self.submitted.append((request, future))
            if len(self.submitted) == 2:
                for call, pending in self.submitted:
                    data = call.inputs[0].data * (1 if call.model_name == "first" else 10)
                    y = Tensor("Y", "FP32", data.shape, data)
                    pending.set_result(InferenceResponse(call.model_name, "1", [y]))
        return future

    def infer(self, request: InferenceRequest, timeout: float | None = None) -> InferenceResponse:
        return self.submit(request).result(timeout)


def test_gathered_async_exec_calls_run_at_once(tmp_path: Path) -> None:
    model_file = tmp_path / "py" / "1" / "model.py"
    model_file.parent.mkdir(parents=True)
    model_file.write_text(ASYNC_MODEL)
    config = ModelConfig.model_validate(
        {
            "name": "py",
            "backend": "python",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "FP32", "dims": [2]}],
            "output": [{"name": "OUTPUT0", "data_type": "FP32", "dims": [2]}],
        }
    )
    caller = BothOrNone()
    backend = PythonBackend(model_file, config, InstanceSpec(caller=caller))
    try:
        x = np.array([[1.0, 2.0]], np.float32)
        out = backend.execute({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
    finally:
        backend.close()
    np.testing.assert_array_equal(out, x * 11)
    assert [request.model_name for request, _ in caller.submitted] == ["first", "second"]
