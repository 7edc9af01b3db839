"""Decoupled Python models (0..N responses per request), for the streaming tests, the
streaming benchmark and the examples: ``model_transaction_policy { decoupled: true }``.

* :func:`repeat_int32` and :func:`square_int32` take the inputs and outputs of Triton's
  ``python_backend/examples/decoupled`` models of those names, so its ``repeat_client`` and
  ``square_client`` read their answers; written here in Triton's style (``execute`` returns
  None, responses go out through ``request.get_response_sender()``, from threads the model
  starts).
* :func:`tokens` is a TorchServe-style handler whose ``inference`` yields: each word of its
  text input is one response, the way a text model streams tokens (HTTP ``generate_stream``).
"""

from __future__ import annotations

from pathlib import Path

REPEAT = '''
import threading
import time

import numpy as np
from inferplex.handler import triton as pb_utils


class TritonPythonModel:
    """One response per element of IN (OUT = that element, IDX = its index), each after
    its DELAY in ms, sent by a thread of its own; execute returns after WAIT ms, maybe
    before the responses are all sent."""

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if values.shape != delays.shape:
                raise pb_utils.TritonModelException("IN and DELAY must have the same shape")
            sender = request.get_response_sender()
            threading.Thread(target=self._send, args=(sender, values, delays), daemon=True).start()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            time.sleep(float(wait[0]) / 1000)
        return None

    def _send(self, sender, values, delays):
        for index, (value, delay) in enumerate(zip(values.ravel(), delays.ravel())):
            time.sleep(float(delay) / 1000)
            if sender.is_cancelled():
                break
            out = pb_utils.Tensor("OUT", np.array([value], np.int32))
            idx = pb_utils.Tensor("IDX", np.array([index], np.uint32))
            sender.send(pb_utils.InferenceResponse([out, idx]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""

SQUARE = '''
import threading

import numpy as np
from inferplex.handler import triton as pb_utils


class TritonPythonModel:
    """IN = [n]: n responses, each OUT = [n] (none for 0), from a thread per request."""

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self._send, args=(sender, n), daemon=True).start()
        return None

    def _send(self, sender, n):
        out = pb_utils.Tensor("OUT", np.array([n], np.int32))
        for _ in range(n):
            if sender.is_cancelled():
                break
            sender.send(pb_utils.InferenceResponse([out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

SQUARE_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU } ]
"""

TOKENS = '''
import numpy as np
from inferplex.handler import BaseHandler


class Handler(BaseHandler):
    """Streams its text input back a word at a time: each yield is one response."""

    def inference(self, data):
        text = data["text_input"].reshape(-1)[0].decode()
        for word in text.split():
            yield {"text_output": np.array([word.encode()], dtype=object)}
'''

TOKENS_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def write_model(repo: Path, name: str, code: str, config: str) -> Path:
    """``<repo>/<name>/1/model.py`` and its config.pbtxt; returns the model's folder."""
    folder = repo / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "1" / "model.py").write_text(code)
    (folder / "config.pbtxt").write_text(f'name: "{name}"\n{config}')
    return folder


def repeat_int32(repo: Path, name: str = "repeat_int32") -> Path:
    return write_model(repo, name, REPEAT, REPEAT_CONFIG)


def square_int32(repo: Path, name: str = "square_int32") -> Path:
    return write_model(repo, name, SQUARE, SQUARE_CONFIG)


def tokens(repo: Path, name: str = "tokens") -> Path:
    return write_model(repo, name, TOKENS, TOKENS_CONFIG)
