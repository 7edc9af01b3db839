"""The typed contents of a V2 gRPC input (``InferTensorContents``: one repeated field per
kind of value, the narrow integer types widened to 32 bits) as a numpy array of the input's
datatype, each value checked against the datatype's range."""

from __future__ import annotations

from typing import Any

import numpy as np

from inferplex.dataplane.checks import element_count_error, out_of_range_error
from inferplex.datatypes import V2_TO_NUMPY, element_count, reshape_input
from inferplex.errors import InvalidInputError
from inferplex.security.charges import BYTES_ELEMENT_COST, charge

__all__ = ["TYPED_CONTENTS", "decode_typed"]

#: V2 datatype -> (InferTensorContents field, numpy dtype the field's values decode to).
#: The narrow integer types travel widened to 32 bits; FP16 has no typed field (raw only).
TYPED_CONTENTS: dict[str, tuple[str, np.dtype]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
    "BYTES": ("bytes_contents", np.dtype(np.object_)),
}

_CONTENTS_FIELDS = sorted({field for field, _ in TYPED_CONTENTS.values()})


def decode_typed(contents: Any, name: str, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype not in TYPED_CONTENTS:
        raise InvalidInputError(
            f"input '{name}': {datatype} data has no typed contents field; send it in "
            "raw_input_contents"
        )
    field, wire_dtype = TYPED_CONTENTS[datatype]
    values = getattr(contents, field)
    count = element_count(shape)
    if len(values) != count:
        raise InvalidInputError(_count_message(contents, name, shape, field, len(values)))
    # an object per element, or the array as sent and as its datatype
    cost = BYTES_ELEMENT_COST if datatype == "BYTES" else wire_dtype.itemsize + 8
    charge(count * cost, "input '%s': %d elements of contents.%s", name, count, field)
    if datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = list(values)
        return reshape_input(array, shape, name)
    array = np.fromiter(values, dtype=wire_dtype, count=count)
    target = V2_TO_NUMPY[datatype]
    if target != wire_dtype:
        info = np.iinfo(target)
        if count and (array.min() < info.min or array.max() > info.max):
            raise out_of_range_error(name, f"contents.{field}", datatype, info.min, info.max)
        array = array.astype(target)
    return reshape_input(array, shape, name)


def _count_message(contents: Any, name: str, shape: tuple[int, ...], field: str, got: int) -> str:
    message = element_count_error(name, f"contents.{field}", got, shape).message
    others = [f for f in _CONTENTS_FIELDS if f != field and len(getattr(contents, f))]
    if others:
        message += f" (data was sent in {', '.join('contents.' + f for f in others)} instead)"
    return message
