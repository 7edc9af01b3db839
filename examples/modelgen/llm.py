"""Generative test models with Triton's LLM conventions, for the OpenAI API's tests and
examples (docs/openai.md): written in Triton's Python-backend style, decoupled.

* :func:`mock_llm`: ``text_input`` -> ``text_output`` streamed a word at a time, with the
  inputs and extra outputs of Triton's vLLM backend (``stream``, ``sampling_parameters``,
  ``exclude_input_in_output``, ``return_finish_reason``, ``return_num_input_tokens``,
  ``return_num_output_tokens``, ``return_logprobs``) and a word-level tokenizer with a ChatML
  chat template in its folder. It "generates" the words of the prompt's last line (the
  user's message, under ChatML), over and over: up to ``max_tokens`` (finish "length"), or
  once through (finish "stop"). A ``seed`` rotates where it starts; the parameter
  ``delay_ms`` paces its words; with the parameter ``progress``, it writes how many words it
  sent to that file, and "cancelled" when its client went away.
* :func:`bare_llm`: the same words with Triton's smallest convention (``text_input`` and
  ``stream`` only, dims [1, 1], as Triton's own ``mock_llm``), and no tokenizer files.
"""

from __future__ import annotations

from pathlib import Path

from examples.modelgen.decoupled import write_model
from examples.modelgen.text import write_tokenizer

MOCK_LLM = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _input(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.delay = float(parameters.get("delay_ms", {}).get("string_value", "0")) / 1000
        self.progress = parameters.get("progress", {}).get("string_value", "")

    def report(self, text):
        if self.progress:
            with open(self.progress + ".new", "w") as file:
                file.write(text)
            os.replace(self.progress + ".new", self.progress)

    def execute(self, requests):
        for request in requests:
            self.answer(request)
        return None

    def answer(self, request):
        sender = request.get_response_sender()
        prompt = _input(request, "text_input").decode("utf-8")
        stream = bool(_input(request, "stream", False))
        raw = _input(request, "sampling_parameters", b"{}")
        sampling = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
        lines = [line for line in prompt.replace("<|im_end|>", "").splitlines() if line.strip()]
        chosen = [ln for ln in lines if not ln.startswith("<|im_start|>")]
        words = (chosen[-1] if chosen else prompt).split() or ["nothing"]
        start = int(sampling.get("seed", 0)) % len(words)
        words = words[start:] + words[:start]
        limit = sampling.get("max_tokens")
        count = limit if limit is not None else len(words)
        reason = "length" if limit is not None else "stop"
        extra = {
            name: bool(_input(request, name, False))
            for name in ("return_finish_reason", "return_num_input_tokens",
                         "return_num_output_tokens", "return_logprobs")
        }
        top = sampling.get("logprobs") if extra["return_logprobs"] else None
        pieces = [" " + words[i % len(words)] for i in range(count)]
        if not stream:
            pieces = ["".join(pieces)]
        for index, piece in enumerate(pieces):
            if sender.is_cancelled():  # as Triton's: the request still ends with the final flag
                self.report("cancelled")
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            if self.delay:
                time.sleep(self.delay)
            outputs = [pb_utils.Tensor("text_output", np.array([piece.encode()], dtype=object))]
            last = index == len(pieces) - 1
            made = len(piece.split())
            if extra["return_num_output_tokens"]:
                outputs.append(pb_utils.Tensor("num_output_tokens", np.array([made], np.uint32)))
            if extra["return_num_input_tokens"]:
                found = np.array([len(prompt.split())], np.uint32)
                outputs.append(pb_utils.Tensor("num_input_tokens", found))
            if extra["return_finish_reason"]:
                said = reason if last else "None"
                outputs.append(pb_utils.Tensor("finish_reason", np.array([said.encode()], object)))
            if top is not None:
                steps = [
                    {str(k): {"logprob": -0.5 * (k + 1), "rank": k + 1, "decoded_token": w}
                     for k, w in enumerate([word, *["the", "a", "of"][:top]][: top + 1])}
                    for word in piece.split()
                ]
                text = json.dumps(steps).encode()
                outputs.append(pb_utils.Tensor("logprobs", np.array([text], dtype=object)))
            flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0
            sender.send(pb_utils.InferenceResponse(outputs), flags=flags)
            self.report(str(index + 1))
"""

MOCK_LLM_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [
  {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true }},
  {{ name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_finish_reason" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }},
  {{ name: "return_logprobs" data_type: TYPE_BOOL dims: [ 1 ] optional: true }}
]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "finish_reason" data_type: TYPE_STRING dims: [ -1 ] }},
  {{ name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }},
  {{ name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ -1 ] }},
  {{ name: "logprobs" data_type: TYPE_STRING dims: [ -1 ] }}
]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters [
  {{ key: "delay_ms" value {{ string_value: "{delay_ms}" }} }},
  {{ key: "progress" value {{ string_value: "{progress}" }} }}
]
"""

BARE_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1, 1 ] }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
"""


def mock_llm(
    repo: Path,
    name: str = "mock_llm",
    *,
    context_length: int = 256,
    delay_ms: float = 0,
    progress: Path | None = None,
    instances: int = 2,
) -> Path:
    """The model with its tokenizer files; returns its folder."""
    config = MOCK_LLM_CONFIG.format(instances=instances, delay_ms=delay_ms, progress=progress or "")
    folder = write_model(repo, name, MOCK_LLM, config)
    write_tokenizer(folder, context_length)
    return folder


def bare_llm(repo: Path, name: str = "bare_llm") -> Path:
    return write_model(repo, name, MOCK_LLM, BARE_CONFIG)
