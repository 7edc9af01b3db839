"""The one request type and the one response type that flow through every layer.

Frontends translate wire formats to and from these; nothing here knows about protocols.
Plain slotted classes, not pydantic: they are built once per request on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

Parameters = dict[str, Any]


@dataclass(slots=True)
class Tensor:
    """A named tensor. ``data`` has ``shape``; BYTES data is an object array of ``bytes``."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (e.g. binary_data)."""

    name: str
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferenceRequest:
    model_name: str
    inputs: list[Tensor]
    model_version: str = ""
    id: str = ""
    outputs: list[RequestedOutput] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferenceResponse:
    model_name: str
    model_version: str
    outputs: list[Tensor]
    id: str = ""
    parameters: Parameters = field(default_factory=dict)
