"""The requests of a chat or completion for a model with Triton's LLM conventions (the vLLM
backend's, Triton's OpenAI frontend's test models'): ``text_input`` (BYTES) in, and as the
model declares them ``stream`` (BOOL), ``sampling_parameters`` (a JSON string of vLLM's
SamplingParams), ``exclude_input_in_output`` (BOOL), ``max_tokens`` (TensorRT-LLM's), the
``return_*`` switches of the extra outputs (``finish_reason``, ``num_input_tokens``,
``num_output_tokens``, ``logprobs``); ``text_output`` (BYTES) out, one response per piece
when streamed. A sampling field goes into ``sampling_parameters``, else into an input of its
own name (TensorRT-LLM's ``temperature``, ``top_p``, ...), else it is a 400 naming it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.protocol.openai.errors import FieldError
from inferplex.protocol.openai.requests import Sampling
from inferplex.types import InferenceRequest, Tensor

TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"
SAMPLING = "sampling_parameters"
#: the extra outputs a model may be asked for, by the input that asks
EXTRA_OUTPUTS = {
    "return_finish_reason": "finish_reason",
    "return_num_input_tokens": "num_input_tokens",
    "return_num_output_tokens": "num_output_tokens",
}
LOGPROBS_SWITCH, LOGPROBS = "return_logprobs", "logprobs"


@dataclass(frozen=True, slots=True)
class LLMModel:
    """What a model takes and gives, of Triton's LLM conventions."""

    name: str
    inputs: dict[str, TensorConfig]
    outputs: frozenset[str]
    batched: bool

    @property
    def logprobs(self) -> bool:
        return (
            LOGPROBS_SWITCH in self.inputs and LOGPROBS in self.outputs and SAMPLING in self.inputs
        )


def llm_model(config: ModelConfig) -> LLMModel:
    """The description of a model, or a 400 for one that does not take text the Triton way."""
    inputs = {t.name: t for t in config.input}
    outputs = frozenset(t.name for t in config.output)
    text_in = inputs.get(TEXT_INPUT)
    if text_in is None or text_in.data_type != "BYTES" or TEXT_OUTPUT not in outputs:
        raise FieldError(
            "model",
            f"model '{config.name}' does not generate text: a chat or completion model takes "
            f"a BYTES input '{TEXT_INPUT}' and gives a BYTES output '{TEXT_OUTPUT}'",
        )
    return LLMModel(config.name, inputs, outputs, config.batched)


def llm_request(
    model: LLMModel, prompt: str, sampling: Sampling, stream: bool, index: int, request_id: str
) -> InferenceRequest:
    """The request of one choice (``index``) of a prompt."""
    tensors = [_tensor(model, TEXT_INPUT, prompt.encode("utf-8"))]
    options = dict(sampling.options)
    if index and "seed" in options:  # the choices of one seed differ, reproducibly
        options["seed"] = (options["seed"] + index) % 2**64
    if sampling.max_tokens is not None:
        options["max_tokens"] = sampling.max_tokens
    if sampling.stop:
        options["stop"] = sampling.stop
    if sampling.logprobs is not None:
        if not model.logprobs:
            raise FieldError(
                "logprobs",
                f"model '{model.name}' does not provide log-probabilities (it takes no "
                f"'{LOGPROBS_SWITCH}' and '{SAMPLING}' inputs or gives no '{LOGPROBS}' output)",
            )
        options["logprobs"] = sampling.logprobs
        tensors.append(_tensor(model, LOGPROBS_SWITCH, True))
    tensors.extend(_sampling_tensors(model, options))
    # a model that cannot be told where to stop streams, so the server counts its tokens
    told = SAMPLING in model.inputs or "max_tokens" in model.inputs
    enforced = not told and (sampling.max_tokens is not None or bool(sampling.stop))
    switches: dict[str, Any] = {"stream": stream or enforced, "exclude_input_in_output": True}
    for switch, output in EXTRA_OUTPUTS.items():
        if output in model.outputs:
            switches[switch] = True
    tensors.extend(_tensor(model, name, v) for name, v in switches.items() if name in model.inputs)
    return InferenceRequest(model.name, tensors, id=request_id)


def _sampling_tensors(model: LLMModel, options: dict[str, Any]) -> list[Tensor]:
    """``options`` as the model takes them: one JSON input, or one input each."""
    if SAMPLING in model.inputs:
        return [_tensor(model, SAMPLING, orjson.dumps(options))] if options else []
    tensors = []
    for name, value in options.items():
        if name in model.inputs:
            tensors.append(_tensor(model, name, value))
        elif name not in ("max_tokens", "stop"):  # those two the server enforces itself
            raise FieldError(
                name,
                f"model '{model.name}' cannot honour '{name}': it takes neither a "
                f"'{SAMPLING}' input nor a '{name}' input",
            )
    return tensors


def _tensor(model: LLMModel, name: str, value: Any) -> Tensor:
    """An input of one element, in the shape the model declares (its variable dimensions
    and batch dimension 1)."""
    spec = model.inputs[name]
    dims = tuple(1 if d == -1 else d for d in spec.dims)
    shape = (1, *dims) if model.batched else dims
    if int(np.prod(shape)) != 1:
        raise InvalidInputError(
            f"model '{model.name}': input '{name}' has dims {list(spec.dims)}; the OpenAI API "
            "sends it one element"
        )
    if spec.data_type == "BYTES":
        data = np.array([value if isinstance(value, bytes) else str(value).encode()], object)
    else:
        try:
            data = np.array([value], V2_TO_NUMPY[spec.data_type])
        except (OverflowError, ValueError, TypeError):
            raise FieldError(
                name, f"'{name}' {value!r} does not fit input '{name}' ({spec.data_type})"
            ) from None
    return Tensor(name, spec.data_type, shape, data.reshape(shape))
