"""Checks a request against the model's declared inputs and outputs, cheaply, at the edge.

Everything that depends only on the config (expected dims, whether a dim is variable, the
reshape target) is worked out once per model, so a valid request costs a dict lookup and a
few tuple comparisons per input.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from math import prod

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
        batch size (1 for a model without batching)."""
        inputs = self._inputs
        batched = self._batched
        feeds: dict[str, np.ndarray] = {}
        batch_size = -1
        for tensor in request.inputs:
            name = tensor.name
            spec = inputs.get(name)
            if spec is None:
                raise InvalidInputError(
                    f"unknown input '{name}' for model '{self._config.name}', expected "
                    f"{self._names(inputs)}"
                )
            if name in feeds:
                raise InvalidInputError(f"input '{name}' is given more than once")
            if tensor.datatype != spec.datatype:
                raise InvalidInputError(
                    f"input '{name}' has datatype {tensor.datatype}, model "
                    f"'{self._config.name}' expects {spec.datatype}"
                )
            shape = tensor.shape
            if type(shape) is not tuple:
                shape = tuple(shape)
            data = tensor.data
            dtype = getattr(data, "dtype", None)
            # the frontends decode to the declared dtype; the in-process API may not
            if dtype != spec.dtype and not (dtype is not None and _is_bytes(dtype, spec)):
                held = type(data).__name__ if dtype is None else f"numpy {dtype}"
                raise InvalidInputError(
                    f"input '{name}' ({spec.datatype}) holds {held} data, expected a numpy "
                    f"array of {spec.dtype}"
                )
            data_shape = data.shape
            # an array of the declared shape has the right element count by construction
            if data_shape != shape and data.size != prod(shape):
                raise InvalidInputError(
                    f"input '{name}' has {data.size} elements, shape {list(shape)} needs "
                    f"{prod(shape)}"
                )
            if batched:
                dims = shape[1:]
                if not shape or not (
                    dims == spec.dims if spec.fixed else _dims_match(dims, spec.dims)
                ):
                    raise self._shape_error(name, shape, spec.spec)
                rows = shape[0]
                if rows < 1 or rows > self._max_batch_size:
                    raise InvalidInputError(
                        f"input '{name}' has batch size {rows}, model '{self._config.name}' "
                        f"accepts 1 to max_batch_size {self._max_batch_size}"
                    )
                if batch_size != rows:
                    if batch_size != -1:
                        raise InvalidInputError(
                            f"input '{name}' has batch size {rows}, other inputs have "
                            f"{batch_size}: all inputs must share the batch dimension"
                        )
                    batch_size = rows
            elif not (shape == spec.dims if spec.fixed else _dims_match(shape, spec.dims)):
                raise self._shape_error(name, shape, spec.spec)
            if spec.reshape is not None:
                shape = (shape[0], *spec.reshape) if batched else spec.reshape
            feeds[name] = data if data_shape == shape else data.reshape(shape)
        if len(feeds) != len(inputs):
            missing = [name for name in self._required if name not in feeds]
            if missing:
                raise InvalidInputError(
                    f"model '{self._config.name}' is missing required input(s) {missing}, "
                    f"expected {self._names(inputs)}"
                )
        return feeds, batch_size if batch_size > 0 else 1

    def check_declared(self, name: str, datatype: str, shape: tuple[int, ...]) -> None:
        """The checks of ``feeds`` that need only what a request declares of one input (its
        name, datatype and shape): frontends run them before decoding a large tensor, so a
        body whose tensors the model would refuse costs no decoding."""
        spec = self._inputs.get(name)
        if spec is None:
            raise InvalidInputError(
                f"unknown input '{name}' for model '{self._config.name}', expected "
                f"{self._names(self._inputs)}"
            )
        if datatype != spec.datatype:
            raise InvalidInputError(
                f"input '{name}' has datatype {datatype}, model '{self._config.name}' expects "
                f"{spec.datatype}"
            )
        if self._batched:
            if not shape or not _dims_match(shape[1:], spec.dims):
                raise self._shape_error(name, shape, spec.spec)
            if shape[0] < 1 or shape[0] > self._max_batch_size:
                raise InvalidInputError(
                    f"input '{name}' has batch size {shape[0]}, model '{self._config.name}' "
                    f"accepts 1 to max_batch_size {self._max_batch_size}"
                )
        elif not _dims_match(shape, spec.dims):
            raise self._shape_error(name, shape, spec.spec)

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
