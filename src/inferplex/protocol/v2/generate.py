"""Triton's generate extension (``/v2/models/{m}/generate`` and ``/generate_stream``): a flat
JSON object in, flat JSON objects out (docs/streaming.md).

A request is ``{"id": ..., "text_input": "...", "parameters": {...}, ...}``: each key that
names an input of the model becomes that input (a string a BYTES element, a number or a
list of numbers that input's datatype; one value takes the input's declared shape, a list
its own, with the batch dimension of a batching model in front); ``parameters`` and every
other key become request parameters. A response is ``{"id", "model_name",
"model_version", <output>: value, ...}``: an output of one element is that element (text for
BYTES), a larger one its elements as a flat list.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np
import orjson

from inferplex.config.model_config import ModelConfig
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2.rest_json import array_from_json, json_type, parameters_object
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

#: keys of a generate request that are not inputs
_ID, _PARAMETERS = "id", "parameters"


def decode_generate(
    body: bytes | memoryview, config: ModelConfig, version: str
) -> InferenceRequest:
    """The inference request of a generate request's JSON ``body`` for the model ``config``.

    Values are checked as ``/infer`` checks its JSON 'data' (``rest_json``): the kind and
    range of every value, the element count of the shape, strings only for BYTES; and the
    parameters (with every key that names no input) are nested no deeper than /infer's."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInputError(f"the generate request is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidInputError("the generate request must be a JSON object")
    request_id = fields.pop(_ID, "")
    parameters = fields.pop(_PARAMETERS, None) or {}
    if not isinstance(request_id, str) or not isinstance(parameters, dict):
        raise InvalidInputError("'id' must be a string and 'parameters' an object")
    declared = {t.name: t for t in config.input}
    inputs = []
    for key, value in fields.items():
        tensor = declared.get(key)
        if tensor is None:
            parameters[key] = value  # Triton: what names no input is a parameter
            continue
        inputs.append(_tensor(key, tensor.data_type, tensor.dims, config.batched, value))
    parameters_object(parameters, "generate request", "")
    return InferenceRequest(config.name, inputs, version, request_id, parameters=parameters)


def _tensor(name: str, datatype: str, dims: tuple[int, ...], batched: bool, value: Any) -> Tensor:
    """An input of one value (in the declared shape, which must then hold one element) or
    of a list (in its own shape, row-major)."""
    if isinstance(value, list):
        shape = _nested_shape(value)
    elif isinstance(value, dict) or value is None:
        raise InvalidInputError(
            f"input '{name}' must be a string, a number, a boolean or a list, got "
            f"{json_type(value)}"
        )
    else:
        shape = tuple(1 if d == -1 else d for d in dims)
        if prod(shape) != 1:
            raise InvalidInputError(
                f"input '{name}': one value was given, but its shape {list(dims)} holds "
                f"{prod(shape)} elements; send them as a list"
            )
        value = [value]
    array = array_from_json(value, datatype, V2_TO_NUMPY[datatype], shape, prod(shape), name)
    if batched:
        array = array.reshape((1, *array.shape))
    return Tensor(name, datatype, array.shape, array)


def _nested_shape(value: list[Any]) -> tuple[int, ...]:
    """The shape a nested list claims, read down its first elements (the conversion checks
    that the rest agree)."""
    shape = []
    item: Any = value
    while type(item) is list:
        shape.append(len(item))
        if not item:
            break
        item = item[0]
    return tuple(shape)


def encode_generate(response: InferenceResponse) -> dict[str, Any]:
    """The generate response object of one inference response."""
    out: dict[str, Any] = {"id": response.id} if response.id else {}
    out["model_name"] = response.model_name
    out["model_version"] = response.model_version
    for tensor in response.outputs:
        flat = np.asarray(tensor.data).ravel()
        if tensor.datatype == "BYTES":
            values: list[Any] = [_text(item) for item in flat]
        else:
            values = flat.tolist()
        out[tensor.name] = values[0] if len(values) == 1 else values
    return out


def _text(item: Any) -> str:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    return str(item)
