"""Every check of a decoded tensor, in one place: the codecs call them where they meet each
tensor (its name, datatype and shape before its data), the in-process API on each tensor of
a request built in Python, so every protocol refuses the same request with the same words.

- a known datatype (:func:`input_dtype`), no negative dimension (:func:`check_dims`), raw
  data of the size its shape needs (:func:`raw_size_error`), as many elements as the shape
  (:func:`element_count_error`), values its datatype holds (:func:`out_of_range_error`);
- what runs on an input's declared name, datatype and shape before a large tensor is
  decoded (:func:`declared_checks`): the limits, then the model's
  (``RequestValidator.check_declared``);
- shared memory: an input read from the region it names, an output checked against and
  written to its region (:func:`shared_input`, :func:`requested_output`,
  :func:`shared_output`), and the classification extension's output parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod
from typing import Any, Protocol

import numpy as np

from inferplex.core.validation import RequestValidator
from inferplex.dataplane.classification import CLASSIFICATION, class_count
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.security.limits import RequestLimits
from inferplex.shm.registry import REGION, Regions, require

__all__ = [
    "CheckFactory",
    "InputCheck",
    "check_dims",
    "declared_checks",
    "element_count_error",
    "input_dtype",
    "negative_dims",
    "out_of_range_error",
    "raw_size_error",
    "requested_output",
    "shared_input",
    "shared_output",
    "unknown_datatype",
]

#: (input name, datatype, shape) -> None; raises an InferplexError to refuse the request
InputCheck = Callable[[str, str, tuple[int, ...]], None]
#: (model name, model version) -> the InputCheck for a request to that model
CheckFactory = Callable[[str, str], InputCheck]


class ModelChecks(Protocol):
    """Where the checks of the model serving a request come from: the engine."""

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None: ...


def declared_checks(limits: RequestLimits, models: ModelChecks) -> CheckFactory:
    """The per-input checks of a request: ``limits`` first, then the model's, if known."""

    def for_model(model: str, version: str) -> InputCheck:
        validator = models.input_checks(model, version)

        def check(name: str, datatype: str, shape: tuple[int, ...]) -> None:
            limits.check_shape(name, shape)
            if validator is not None:
                validator.check_declared(name, datatype, shape)

        return check

    return for_model


def unknown_datatype(name: str, datatype: Any) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': unknown datatype {datatype!r}, expected one of {', '.join(V2_TO_NUMPY)}"
    )


def input_dtype(name: str, datatype: Any) -> np.dtype:
    """The numpy dtype of an input's datatype; InvalidInputError for one that is unknown."""
    try:
        return V2_TO_NUMPY[datatype]
    except (KeyError, TypeError):  # TypeError: a JSON list or object is not a datatype name
        raise unknown_datatype(name, datatype) from None


def negative_dims(name: str, shape: Any) -> InvalidInputError:
    return InvalidInputError(
        f"input '{name}': 'shape' {list(shape)} has a negative dimension; dimensions are "
        "non-negative integers"
    )


def check_dims(name: str, shape: tuple[int, ...]) -> None:
    """InvalidInputError when a dimension of ``shape`` is negative."""
    if shape and min(shape) < 0:
        raise negative_dims(name, shape)


def raw_size_error(
    name: str, where: str, nbytes: int, datatype: str, shape: tuple[int, ...]
) -> InvalidInputError:
    """The error for raw data of a fixed-size datatype whose ``nbytes`` are not what its
    shape needs; ``where`` names the data in the protocol's terms."""
    itemsize = V2_TO_NUMPY[datatype].itemsize
    count = prod(shape)
    expected = count * itemsize
    return InvalidInputError(
        f"input '{name}': {where} holds {nbytes} bytes, expected {expected}: shape "
        f"{list(shape)} of {datatype} needs {expected} bytes ({count} elements of {itemsize})"
    )


def element_count_error(
    name: str, where: str, got: int, shape: tuple[int, ...]
) -> InvalidInputError:
    """The error for an input whose data (``where``, in the protocol's terms) holds ``got``
    elements where its shape needs another number."""
    return InvalidInputError(
        f"input '{name}': shape {list(shape)} needs {prod(shape)} elements but {where} has {got}"
    )


def out_of_range_error(
    name: str, where: str, datatype: str, low: float, high: float
) -> InvalidInputError:
    """The error for an input whose data has values its datatype cannot hold."""
    return InvalidInputError(
        f"input '{name}': {where} has values outside the range of {datatype} [{low}, {high}]"
    )


# ---- shared memory and output parameters -----------------------------------------------------


def shared_input(
    shm: Regions | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    shape: tuple[int, ...],
) -> np.ndarray:
    """The data of an input whose parameters name a shared-memory region."""
    return require(shm).read_input(name, parameters, datatype, shape)


def requested_output(name: str, parameters: Mapping[str, Any], shm: Regions | None) -> int:
    """The checks of a requested output's parameters the server acts on, as the request
    arrives; returns how many classes the output is asked for (0: its tensor). A codec
    that meets one above 0 makes the request's outputs ClassifiedOutputs. A shared-memory
    region must be registered and large enough, and takes a tensor, not classes."""
    count = class_count(name, parameters) if CLASSIFICATION in parameters else 0
    if REGION in parameters:
        if count:
            raise InvalidInputError(
                f"output '{name}': parameters '{CLASSIFICATION}' and '{REGION}' together: "
                "classes are answered in the response, not in shared memory; give one"
            )
        require(shm).check_output(name, parameters)
    return count


def shared_output(
    shm: Regions | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    data: np.ndarray,
) -> dict[str, Any]:
    """Write an output to the region its request named; returns the parameters that tell
    the client where it is."""
    return require(shm).write_output(name, parameters, datatype, data)
