"""Checks a request against the model's declared inputs and outputs, cheaply, at the edge.

Everything that depends only on the config (expected dims, whether a dim is variable, the
reshape target) is worked out once per model, so a valid request costs a dict lookup and a
few tuple comparisons per input.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable
from math import prod
from typing import Any

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.types import InferenceRequest


def _dims_match(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def _is_bytes(dtype: np.dtype, spec: _Input) -> bool:
    """Whether ``dtype`` holds BYTES elements for a BYTES input (objects, bytes or str)."""
    return spec.datatype == "BYTES" and dtype.kind in "OSU"


def _listed(names: Iterable[str]) -> str:
    """Names as Triton lists them: ['a','b']."""
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def _data_error(
    name: str, spec: _Input, data: Any, dtype: Any, shape: tuple[int, ...]
) -> InvalidInputError:
    """Why an input's data is refused: not an array of the declared dtype, or an element
    count its shape does not have."""
    if dtype != spec.dtype and not (dtype is not None and _is_bytes(dtype, spec)):
        held = type(data).__name__ if dtype is None else f"numpy {dtype}"
        return InvalidInputError(
            f"input '{name}' ({spec.datatype}) holds {held} data, expected a numpy "
            f"array of {spec.dtype}"
        )
    return InvalidInputError(
        f"input '{name}' has {data.size} elements, shape {list(shape)} needs {prod(shape)}"
    )


class _Input:
    """What the checks need of one declared input, precomputed."""

    __slots__ = ("datatype", "dims", "dtype", "fixed", "reshape", "spec")

    def __init__(self, spec: TensorConfig) -> None:
        self.spec = spec
        self.datatype = spec.data_type
        self.dtype = V2_TO_NUMPY[spec.data_type]
        self.dims = tuple(spec.dims)
        self.fixed = -1 not in self.dims  # dims compare with one tuple comparison
        self.reshape = None if spec.reshape is None else tuple(spec.reshape)


class RequestValidator:
    """Validates requests for one model config and turns them into backend feeds."""

    def __init__(self, config: ModelConfig) -> None:
        self._config = config
        self._batched = config.batched
        self._max_batch_size = config.max_batch_size
        self._inputs = {t.name: _Input(t) for t in config.input}
        self._outputs = {t.name: t for t in config.output}
        self._required = [t.name for t in config.input if not t.optional]
        self._all_outputs = [t.name for t in config.output]
        # Every valid request has the same inputs with the same non-batch dims: any two of
        # them can share a batch, and no per-request shape key is needed.
        self.one_signature = all(i.fixed and not i.spec.optional for i in self._inputs.values())

    def feeds(self, request: InferenceRequest) -> tuple[dict[str, np.ndarray], int]:
        """The backend inputs (name -> array, reshaped where the config says so) and the
        batch size (1 for a model without batching). Each check is one test on the way of a
        valid request; what went wrong is worked out only once one fails."""
        inputs = self._inputs
        batched = self._batched
        feeds: dict[str, np.ndarray] = {}
        batch_size = -1
        for tensor in request.inputs:
            name = tensor.name
            spec = inputs.get(name)
            if spec is None or name in feeds or tensor.datatype != spec.datatype:
                raise self._input_error(name, tensor.datatype, spec, feeds)
            shape = tensor.shape
            shape = shape if type(shape) is tuple else tuple(shape)
            data = tensor.data
            dtype = getattr(data, "dtype", None)
            # the frontends decode to the declared dtype; the in-process API may not (then the
            # data may be no array at all). An array of the declared shape has the right
            # element count by construction
            if (dtype != spec.dtype and not (dtype is not None and _is_bytes(dtype, spec))) or (
                (data_shape := data.shape) != shape and data.size != prod(shape)
            ):
                raise _data_error(name, spec, data, dtype, shape)
            if batched:
                dims = shape[1:]
                if not shape or not (
                    dims == spec.dims if spec.fixed else _dims_match(dims, spec.dims)
                ):
                    raise self._shape_error(name, shape, spec.spec)
                rows = shape[0]
                if (
                    rows < 1
                    or rows > self._max_batch_size
                    or (batch_size != rows and batch_size != -1)
                ):
                    raise self._rows_error(name, rows, batch_size)
                batch_size = rows
            elif not (shape == spec.dims if spec.fixed else _dims_match(shape, spec.dims)):
                raise self._shape_error(name, shape, spec.spec)
            if spec.reshape is not None:
                shape = (shape[0], *spec.reshape) if batched else spec.reshape
            feeds[name] = data if data_shape == shape else data.reshape(shape)
        if len(feeds) != len(inputs):
            self._check_required(feeds)
        return feeds, batch_size if batch_size > 0 else 1

    def _input_error(
        self, name: str, datatype: str, spec: _Input | None, feeds: Collection[str]
    ) -> InvalidInputError:
        """Why an input is refused by name or datatype: unknown, repeated, wrong datatype."""
        if spec is None:
            return InvalidInputError(
                f"unknown input '{name}' for model '{self._config.name}', expected "
                f"{self._names(self._inputs)}"
            )
        if name in feeds:
            return InvalidInputError(f"input '{name}' is given more than once")
        return InvalidInputError(
            f"input '{name}' has datatype {datatype}, model "
            f"'{self._config.name}' expects {spec.datatype}"
        )

    def _rows_error(self, name: str, rows: int, batch_size: int) -> InvalidInputError:
        """Why an input's batch dimension is refused: out of range, or unlike the others'."""
        if rows < 1 or rows > self._max_batch_size:
            return InvalidInputError(
                f"input '{name}' has batch size {rows}, model '{self._config.name}' "
                f"accepts 1 to max_batch_size {self._max_batch_size}"
            )
        return InvalidInputError(
            f"input '{name}' has batch size {rows}, other inputs have "
            f"{batch_size}: all inputs must share the batch dimension"
        )

    def _check_required(self, feeds: Collection[str]) -> None:
        """Every input the config does not mark optional was given; if not, Triton's words
        (its clients and tests look for them)."""
        missing = [name for name in self._required if name not in feeds]
        if missing:
            declared, required = len(self._inputs), len(self._required)
            expected = (
                f"{declared} inputs"
                if declared == required
                else f"number of inputs between {required} and {declared}"
            )
            raise InvalidInputError(
                f"expected {expected} but got {len(feeds)} inputs for model "
                f"'{self._config.name}'. Got input(s) {_listed(feeds)}, but missing required "
                f"input(s) {_listed(missing)}. Please provide all required input(s)."
            )

    def check_declared(self, name: str, datatype: str, shape: tuple[int, ...]) -> None:
        """The checks of ``feeds`` that need only what a request declares of one input (its
        name, datatype and shape), with their errors: frontends run them before decoding a
        large tensor, so a body whose tensors the model would refuse costs no decoding."""
        spec = self._inputs.get(name)
        if spec is None or datatype != spec.datatype:
            raise self._input_error(name, datatype, spec, ())
        dims = shape[1:] if self._batched else shape
        if (self._batched and not shape) or not _dims_match(dims, spec.dims):
            raise self._shape_error(name, shape, spec.spec)
        if self._batched and not 1 <= shape[0] <= self._max_batch_size:
            raise self._rows_error(name, shape[0], -1)

    def shape_key(self, feeds: dict[str, np.ndarray]) -> Hashable:
        """What decides which requests of a batched model may share a batch: the names and
        non-batch shapes of their feeds (None when every valid request has the same ones)."""
        if self.one_signature:
            return None
        return tuple((name, array.shape[1:]) for name, array in feeds.items())

    def output_names(self, request: InferenceRequest) -> list[str]:
        """The outputs to compute: the requested ones, or all declared outputs."""
        if not request.outputs:
            return self._all_outputs
        names: list[str] = []
        for output in request.outputs:
            if output.name not in self._outputs:
                raise InvalidInputError(
                    f"unknown output '{output.name}' requested from model "
                    f"'{self._config.name}', expected {self._names(self._outputs)}"
                )
            if output.name not in names:
                names.append(output.name)
        return names

    def output_spec(self, name: str) -> TensorConfig:
        return self._outputs[name]

    def _shape_error(
        self, name: str, shape: tuple[int, ...], spec: TensorConfig
    ) -> InvalidInputError:
        return InvalidInputError(
            f"input '{name}' has shape {list(shape)}, model '{self._config.name}' expects "
            f"{self._config.full_shape(spec)}"
        )

    @staticmethod
    def _names(tensors: Collection[str]) -> str:
        return "one of " + ", ".join(f"'{n}'" for n in tensors) if tensors else "none"
