"""Triton's generate extension (``/v2/models/{m}/generate`` and ``/generate_stream``): a flat
JSON object in, flat JSON objects out (docs/streaming.md), converted as Triton converts them.

A request is ``{"id": ..., "text_input": "...", "parameters": {...}, ...}``, its members read
in order. A key that names an input of the model becomes that input; every other key is a
request parameter; the keys of ``parameters`` are read the same way (one of them may name an
input too). An input's value is one value or a list (nested lists are read row-major), each
value of the input's kind (a string for BYTES, true/false for BOOL, a number otherwise): its
elements take the input's declared shape, the batch dimension of a batching model in front,
as Triton fills it: the fixed dimensions must divide the element count, the innermost
variable one (-1) takes the rest, the other variable ones 1. So ``"PROMPT": "hi"`` and
``"PROMPT": ["hi"]`` both fill dims [1, 1], and 8 numbers fill [-1, 4] as [2, 4]. An input
given twice (two keys, or a key and a key of ``parameters``) is refused.

A response is ``{"id", "model_name", "model_version", <output>: value, ...}``: an output of
one element is that element (text for BYTES), any other its elements as a flat list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Container
from math import prod
from typing import Any

import numpy as np
import orjson

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2.rest_json import json_type, json_values, parameters_object
from inferplex.types import InferenceRequest, InferenceResponse, Tensor

#: keys of a generate request that are not inputs
_ID, _PARAMETERS = "id", "parameters"

Members = list[tuple[str, Any]]


def decode_generate(
    body: bytes | memoryview, config: ModelConfig, version: str
) -> InferenceRequest:
    """The inference request of a generate request's JSON ``body`` for the model ``config``.

    Values are checked as ``/infer`` checks its JSON 'data' (``rest_json``): the kind and
    range of every value, strings only for BYTES; and the parameters (with every key that
    names no input) are nested no deeper than /infer's. A problem is an InvalidInputError
    that names the input, in Triton's words where Triton's tests look for them."""
    request = _Decoded(config)
    for key, value in _members(body, request.declared):
        if key == _ID:
            if not isinstance(value, str):
                raise InvalidInputError(
                    "Unable to parse 'id': attempt to access JSON non-string as string "
                    f"(got {json_type(value)})"
                )
            request.id = value
        elif key == _PARAMETERS and key not in request.declared:
            request.add_nested(value)
        else:
            request.add(key, value)
    parameters_object(request.parameters, "generate request", "")
    return InferenceRequest(
        config.name, request.inputs, version, request.id, parameters=request.parameters
    )


class _Decoded:
    """What a generate request's members make, as they are read."""

    def __init__(self, config: ModelConfig) -> None:
        self.declared: dict[str, TensorConfig] = {t.name: t for t in config.input}
        self.batched = config.batched
        self.id = ""
        self.inputs: list[Tensor] = []
        self.parameters: dict[str, Any] = {}

    def add_nested(self, value: Any) -> None:
        """The members of ``parameters``, each read as a member of the request."""
        if not isinstance(value, dict):
            raise InvalidInputError(
                f"Expected JSON object for keyword: 'parameters' (got {json_type(value)})"
            )
        try:
            for key, item in value.items():
                self.add(key, item)
        except InvalidInputError as exc:
            raise InvalidInputError(f"Converting keyword: 'parameters': {exc.message}") from None

    def add(self, key: str, value: Any) -> None:
        """One member: an input if it names one, else a parameter."""
        tensor = self.declared.get(key)
        if tensor is None:
            self.parameters[key] = value  # Triton: what names no input is a parameter
            return
        if any(given.name == key for given in self.inputs):
            raise InvalidInputError(f"input '{key}' already exists in request")
        dims = (-1, *tensor.dims) if self.batched else tuple(tensor.dims)
        self.inputs.append(_tensor(key, tensor.data_type, dims, value))


def _members(body: bytes | memoryview, inputs: Container[str]) -> Members:
    """The members of the request's JSON object in order, an input's key given twice twice
    (Triton reads them so: a repeated input is an error, not the last value silently; of
    another key given twice, the last value counts).

    orjson parses it (strictly: no lone surrogates, bounded nesting). The standard library
    reads it again, for its members as written, only where orjson cannot say: a body in which
    the text of a key naming an input occurs twice (one scan of the body, whatever the
    keys), and one with the literals NaN, Infinity or -Infinity, which Triton reads (as
    /infer does here) and orjson does not."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raw = bytes(body)
        if b"NaN" not in raw and b"Infinity" not in raw:
            raise InvalidInputError(f"the generate request is not valid JSON: {exc}") from None
        return _read_again(raw)
    if not isinstance(fields, dict):
        raise InvalidInputError("the generate request must be a JSON object")
    if not _repeated(body, [key for key in fields if key in inputs]):
        return list(fields.items())
    return _read_again(bytes(body))


def _read_again(raw: bytes) -> Members:
    """The members of the JSON object ``raw`` as written, read by the standard library (big
    integers come exact, which json_values takes as they are)."""
    top: list[Members] = []

    def keep(pairs: Members) -> dict[str, Any]:
        top[:] = [pairs]  # the object read last is the outermost
        return dict(pairs)

    try:
        fields = json.loads(raw, object_pairs_hook=keep)
    except RecursionError:  # it recurses per level; orjson stops at 1024 levels
        raise InvalidInputError("the generate request is nested too deeply") from None
    except ValueError as exc:
        raise InvalidInputError(f"the generate request is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidInputError("the generate request must be a JSON object")
    return top[0]


def _repeated(body: bytes | memoryview, keys: list[str]) -> bool:
    """Whether one of ``keys``, as JSON writes it, occurs twice in ``body``: one scan (a
    quote inside a string is escaped, so a string value never holds a key's text)."""
    if not keys:
        return False
    texts = re.compile(b"|".join(re.escape(orjson.dumps(key)) for key in keys))
    seen: set[bytes] = set()
    for found in texts.finditer(body):
        if found.group() in seen:
            return True
        seen.add(found.group())
    return False


def _tensor(name: str, datatype: str, dims: tuple[int, ...], value: Any) -> Tensor:
    """An input of one value or of a list, in the shape Triton fills from ``dims``."""
    values = value if isinstance(value, list) else [value]
    flat = json_values(values, datatype, V2_TO_NUMPY[datatype], name)
    array = flat.reshape(_filled(name, dims, flat.size))
    return Tensor(name, datatype, array.shape, array)


def _filled(name: str, dims: tuple[int, ...], count: int) -> tuple[int, ...]:
    """Triton's shape for ``count`` elements of an input declared ``dims`` (each positive or
    -1): the innermost -1 takes what the fixed dimensions leave, every other -1 is 1."""
    fixed = prod(d for d in dims if d != -1)
    variable = [i for i, d in enumerate(dims) if d == -1]
    if count % fixed if variable else count != fixed:
        raise InvalidInputError(
            f"The schema can not convert input '{name}' to tensor with proper shape: its "
            f"{count} element(s) do not fill the shape {list(dims)}"
        )
    shape = [1 if d == -1 else d for d in dims]
    if variable:
        shape[variable[-1]] = count // fixed
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
