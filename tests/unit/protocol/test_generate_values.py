"""Any JSON value for any declared input of a generate request decodes or is a 400
(InvalidInputError naming the input), never another exception (issue 30: a boolean or one
value for a larger shape was a 500 'cannot reshape', 100 of these cases on main)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from inferplex.config.model_config import ModelConfig
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2.generate import decode_generate

DEEP: Any = 1
for _ in range(100):
    DEEP = [DEEP]
VALUES: list[Any] = [
    True, 1.5, [], [[]], [[[]]], [1, 2, 3], [[1, 2], [3]], "x", "", ["x"], [["a", "b"], ["c"]],
    DEEP, {"a": 1}, None, 2**70, -1, [2**70], ["x", 1], [1, "x"], [None], [[None]], [1, 2],
    [[1, 2]], [[1], [2]], [True, False],
]  # fmt: skip


def config(dims: tuple[int, ...], batched: bool, datatype: str) -> ModelConfig:
    kind = "STRING" if datatype == "BYTES" else datatype
    return ModelConfig.model_validate(
        {
            "name": "m",
            "max_batch_size": 8 if batched else 0,
            "input": [{"name": "X", "data_type": f"TYPE_{kind}", "dims": list(dims)}],
        }
    )


@pytest.mark.parametrize(
    ("dims", "batched", "datatype"),
    list(
        itertools.product(
            [(2,), (-1,), (1,), (), (2, 3)], [True, False], ["INT32", "FP32", "BYTES"]
        )
    ),
)
def test_every_value_decodes_or_is_a_400_naming_the_input(
    dims: tuple[int, ...], batched: bool, datatype: str
) -> None:
    model = config(dims, batched, datatype)
    for value in VALUES:
        try:
            request = decode_generate(json.dumps({"X": value}).encode(), model, "1")
        except InvalidInputError as exc:
            assert "'X'" in exc.message, exc.message
            continue
        tensor = request.inputs[0]
        assert tensor.data.shape == tuple(tensor.shape)
        if datatype == "INT32":
            assert tensor.data.dtype == np.int32
            assert np.array_equal(tensor.data.reshape(-1), np.array(value).reshape(-1))
        if datatype == "BYTES":
            assert all(type(item) is bytes for item in tensor.data.reshape(-1))
