"""What every message of a model config is made of: a frozen pydantic model that refuses
fields it does not know, and data types given as Triton's TYPE_* or V2 names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from inferplex.datatypes import TRITON_TO_V2, V2_DATATYPES


class Section(BaseModel):
    """A config message: validated once, then frozen; an unknown field is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def normalise_datatype(value: Any) -> Any:
    """Accept Triton's TYPE_FP32 and the V2 name FP32; store the V2 name."""
    if isinstance(value, str):
        upper = value.upper()
        if upper in TRITON_TO_V2:
            return TRITON_TO_V2[upper]
        if upper in V2_DATATYPES:
            return upper
        raise ValueError(
            f"unknown data_type '{value}', expected a TYPE_* name such as TYPE_FP32 "
            "or a V2 datatype such as FP32"
        )
    return value
