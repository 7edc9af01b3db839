"""A generate request is read as Triton reads it (issue 31): members in order, a repeated
input refused, the keys of 'parameters' read like the others, values filling the declared
dims the way Triton fills them, and Triton's words in the errors its tests look for."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2.generate import decode_generate

#: Triton's mock_llm (qa/python_models/generate_models) and a batching model
MOCK_LLM = ModelConfig.model_validate(
    {
        "name": "mock_llm",
        "max_batch_size": 0,
        "input": [
            {"name": "PROMPT", "data_type": "TYPE_STRING", "dims": [1, 1]},
            {"name": "STREAM", "data_type": "TYPE_BOOL", "dims": [1, 1]},
            {"name": "input_ids", "data_type": "TYPE_INT32", "dims": [1, -1], "optional": True},
        ],
    }
)
BATCHING = ModelConfig.model_validate(
    {
        "name": "b",
        "max_batch_size": 8,
        "input": [
            {"name": "X", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "Y", "data_type": "TYPE_INT64", "dims": [-1, 2, -1]},
            {"name": "Z", "data_type": "TYPE_UINT8", "dims": [3, -1], "optional": True},
        ],
    }
)

#: lists nested 1000 deep: orjson reads them, Python's json module recurses too far
DEEP = "[" * 1000 + "]" * 1000


def decode(body: Any, config: ModelConfig = MOCK_LLM) -> Any:
    raw = body.encode() if isinstance(body, str) else orjson.dumps(body)
    return decode_generate(raw, config, "1")


@pytest.mark.parametrize(
    ("config", "name", "value", "shape"),
    [
        (MOCK_LLM, "PROMPT", "hi", (1, 1)),
        (MOCK_LLM, "PROMPT", ["hi"], (1, 1)),
        (MOCK_LLM, "PROMPT", [["hi"]], (1, 1)),
        (MOCK_LLM, "STREAM", True, (1, 1)),
        (MOCK_LLM, "input_ids", [1, 2, 3], (1, 3)),
        (MOCK_LLM, "input_ids", 7, (1, 1)),
        (MOCK_LLM, "input_ids", [], (1, 0)),
        # the batch dimension is a -1 like the others: what the fixed dims leave goes to the
        # innermost -1, every other -1 is 1
        (BATCHING, "X", [1.0] * 4, (1, 4)),
        (BATCHING, "X", [1.0] * 8, (2, 4)),
        (BATCHING, "X", [[1.0] * 4, [2.0] * 4], (2, 4)),
        (BATCHING, "Y", list(range(6)), (1, 1, 2, 3)),
        (BATCHING, "Z", [], (1, 3, 0)),
        (BATCHING, "Z", [4] * 6, (1, 3, 2)),
    ],
)
def test_values_fill_the_declared_dims_as_triton_fills_them(
    config: ModelConfig, name: str, value: Any, shape: tuple[int, ...]
) -> None:
    (tensor,) = decode({name: value}, config).inputs
    assert tensor.shape == shape == tensor.data.shape
    assert tensor.data.reshape(-1).tolist() == np.array(value).reshape(-1).tolist() or (
        tensor.datatype == "BYTES"
    )


@pytest.mark.parametrize(
    ("config", "body", "fragment"),
    [
        (MOCK_LLM, {"PROMPT": ["a", "b"]}, "convert input 'PROMPT' to tensor with proper shape"),
        (BATCHING, {"X": [1.0] * 6}, "convert input 'X' to tensor with proper shape"),
        (BATCHING, {"Y": [1, 2, 3]}, "convert input 'Y' to tensor with proper shape"),
        (BATCHING, {"Z": [1]}, "convert input 'Z' to tensor with proper shape"),
        # Triton's words for a value of the wrong kind, with the input named
        (MOCK_LLM, {"PROMPT": 123}, "input 'PROMPT': BYTES 'data' must hold strings"),
        (MOCK_LLM, {"PROMPT": 123}, "attempt to access JSON non-string as string"),
        (MOCK_LLM, {"PROMPT": {"USER": "x"}}, "attempt to access JSON non-string as string"),
        (MOCK_LLM, {"STREAM": "false"}, "attempt to access JSON non-boolean as boolean"),
        (MOCK_LLM, {"input_ids": [1.5]}, "non-signed-integer as signed-integer"),
        (BATCHING, {"Z": [[]], "X": ["a"] * 4}, "attempt to access JSON non-number as double"),
        # members in order: the first bad one is the error
        (MOCK_LLM, {"PROMPT": True, "STREAM": 123}, "non-string as string"),
        (MOCK_LLM, {"STREAM": 123, "PROMPT": True}, "non-boolean as boolean"),
        # a repeated input, as two keys or as a key and a key of parameters
        (
            MOCK_LLM,
            '{"PROMPT": "a", "STREAM": false, "PROMPT": "b"}',
            "input 'PROMPT' already exists",
        ),
        (
            MOCK_LLM,
            '{"PROMPT": "a", "STREAM": false, "STREAM": true, "PROMPT": "b"}',
            "input 'STREAM' already exists",
        ),
        (MOCK_LLM, {"PROMPT": "a", "parameters": {"PROMPT": "b"}}, "input 'PROMPT' already exists"),
        (MOCK_LLM, {"parameters": 1}, "Expected JSON object for keyword: 'parameters'"),
        (
            MOCK_LLM,
            {"parameters": {"PROMPT": 5}},
            "Converting keyword: 'parameters': input 'PROMPT': BYTES 'data' must hold strings",
        ),
        (MOCK_LLM, {"id": 42}, "Unable to parse 'id'"),
        (MOCK_LLM, "[1]", "must be a JSON object"),
        (MOCK_LLM, "[NaN]", "must be a JSON object"),
        (MOCK_LLM, '{"PROMPT": "\\ud800", "x": NaN}', "input 'PROMPT': a string holds a lone"),
        (MOCK_LLM, '{"PROMPT": NaNa}', "not valid JSON"),
        # deeper than Python's recursion limit, read again for its repeated input: a 400
        (MOCK_LLM, '{"PROMPT": "a", "p": ' + DEEP + ', "PROMPT": "b"}', "nested"),
        (MOCK_LLM, '{"PROMPT": NaN}', "attempt to access JSON non-string as string"),
    ],
)
def test_what_triton_refuses_is_a_400_in_its_words(
    config: ModelConfig, body: Any, fragment: str
) -> None:
    """``body``: a JSON value, or the text of one (for what a dict cannot hold)."""
    with pytest.raises(InvalidInputError) as caught:
        decode(body, config)
    assert fragment in caught.value.message


def test_the_keys_of_parameters_are_read_like_the_others() -> None:
    request = decode(
        {"id": "7", "PROMPT": "a", "other": 1, "parameters": {"STREAM": True, "REPETITION": 3}}
    )
    assert request.id == "7"
    assert [t.name for t in request.inputs] == ["PROMPT", "STREAM"]
    assert request.parameters == {"other": 1, "REPETITION": 3}


def test_a_repeated_parameter_takes_the_last_value() -> None:
    request = decode('{"PROMPT": "a", "p": 1, "p": 2, "PROMPTS": 3}')
    assert request.parameters == {"p": 2, "PROMPTS": 3}


def test_non_finite_literals_are_read_as_triton_and_infer_read_them() -> None:
    body = '{"X": [NaN, Infinity, -Infinity, 1], "X": [1, 2, 3, 4]}'
    with pytest.raises(InvalidInputError, match="input 'X' already exists"):
        decode(body, BATCHING)
    (tensor,) = decode('{"X": [NaN, Infinity, -Infinity, 1]}', BATCHING).inputs
    np.testing.assert_array_equal(tensor.data, [[np.nan, np.inf, -np.inf, 1]])
