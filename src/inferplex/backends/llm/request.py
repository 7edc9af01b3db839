"""One request's inputs, by Triton's LLM conventions (its vLLM backend's): ``text_input``
(the prompt), and optional ``stream``, ``sampling_parameters`` (a JSON object),
``exclude_input_in_output``, ``max_tokens`` and ``return_finish_reason`` /
``return_num_input_tokens`` / ``return_num_output_tokens``; sampling settings may also come
as request parameters (the generate endpoint's ``parameters``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplex.backends.llm.params import SAMPLING_NAMES, SamplingParams, parse_sampling
from inferplex.config.model_config import TensorConfig
from inferplex.errors import InvalidInputError

#: the inputs and outputs of an LLM model's config (what auto-complete declares)
INPUTS = (
    TensorConfig(name="text_input", data_type="BYTES", dims=(1,)),
    TensorConfig(name="stream", data_type="BOOL", dims=(1,), optional=True),
    TensorConfig(name="sampling_parameters", data_type="BYTES", dims=(1,), optional=True),
    TensorConfig(name="exclude_input_in_output", data_type="BOOL", dims=(1,), optional=True),
    TensorConfig(name="max_tokens", data_type="INT32", dims=(1,), optional=True),
    TensorConfig(name="return_finish_reason", data_type="BOOL", dims=(1,), optional=True),
    TensorConfig(name="return_num_input_tokens", data_type="BOOL", dims=(1,), optional=True),
    TensorConfig(name="return_num_output_tokens", data_type="BOOL", dims=(1,), optional=True),
)
OUTPUTS = (
    TensorConfig(name="text_output", data_type="BYTES", dims=(-1,)),
    TensorConfig(name="finish_reason", data_type="BYTES", dims=(-1,)),
    TensorConfig(name="num_input_tokens", data_type="UINT32", dims=(-1,)),
    TensorConfig(name="num_output_tokens", data_type="UINT32", dims=(-1,)),
)


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """What one request asks for."""

    prompt: str
    stream: bool
    exclude_input: bool
    params: SamplingParams
    return_finish_reason: bool
    return_input_tokens: bool
    return_output_tokens: bool


def read_request(
    inputs: Mapping[str, np.ndarray], parameters: Mapping[str, Any]
) -> GenerateRequest:
    """The request of these inputs (its rows alone) and request parameters."""
    prompt = _text(inputs, "text_input")
    if prompt is None:
        raise InvalidInputError("input 'text_input' (the prompt, BYTES) is required")
    settings: dict[str, Any] = {}
    raw = _text(inputs, "sampling_parameters")
    if raw:
        try:
            settings = json.loads(raw)
        except ValueError as exc:
            raise InvalidInputError(f"input 'sampling_parameters' is not JSON: {exc}") from None
        if not isinstance(settings, dict):
            raise InvalidInputError("input 'sampling_parameters' must be a JSON object")
    # request parameters may carry others (the protocol's own): only sampling names count
    settings |= {k: v for k, v in parameters.items() if k in SAMPLING_NAMES}
    max_tokens = inputs.get("max_tokens")
    if max_tokens is not None:
        settings["max_tokens"] = int(_one(max_tokens, "max_tokens"))
    stream = _flag(inputs, "stream")
    if stream is None:
        stream = bool(parameters.get("stream", False))
    return GenerateRequest(
        prompt=prompt,
        stream=stream,
        exclude_input=_flag(inputs, "exclude_input_in_output") or False,
        params=parse_sampling(settings),
        return_finish_reason=_flag(inputs, "return_finish_reason") or False,
        return_input_tokens=_flag(inputs, "return_num_input_tokens") or False,
        return_output_tokens=_flag(inputs, "return_num_output_tokens") or False,
    )


def _one(array: np.ndarray, name: str) -> Any:
    if array.size != 1:
        raise InvalidInputError(f"input '{name}' must hold one element, got {array.size}")
    return array.reshape(-1)[0]


def _text(inputs: Mapping[str, np.ndarray], name: str) -> str | None:
    array = inputs.get(name)
    if array is None:
        return None
    value = _one(array, name)
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise InvalidInputError(f"input '{name}' is not UTF-8 text") from None
    return str(value)


def _flag(inputs: Mapping[str, np.ndarray], name: str) -> bool | None:
    array = inputs.get(name)
    return None if array is None else bool(_one(array, name))
