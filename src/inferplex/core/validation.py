"""Checks a request against the model's declared inputs and outputs, cheaply, at the edge."""

from __future__ import annotations

import numpy as np

from inferplex.config.model_config import ModelConfig, TensorConfig
from inferplex.core.datatypes import element_count
from inferplex.core.types import InferenceRequest
from inferplex.errors import InvalidInputError


def _dims_match(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(d == -1 or d == s for s, d in zip(shape, dims, strict=True))


def _expected_shape(config: ModelConfig, spec: TensorConfig) -> str:
    return str(config.full_shape(spec))


class RequestValidator:
    """Validates requests for one model config and turns them into backend feeds."""

    def __init__(self, config: ModelConfig) -> None:
        self._config = config
        self._inputs = {t.name: t for t in config.input}
        self._outputs = {t.name: t for t in config.output}
        self._required = [t.name for t in config.input if not t.optional]
        self._all_outputs = [t.name for t in config.output]

    def feeds(self, request: InferenceRequest) -> tuple[dict[str, np.ndarray], int]:
        """The backend inputs (name -> array, reshaped where the config says so) and the
        batch size (1 for a model without batching)."""
        config = self._config
        feeds: dict[str, np.ndarray] = {}
        batch_size = -1
        for tensor in request.inputs:
            spec = self._inputs.get(tensor.name)
            if spec is None:
                raise InvalidInputError(
                    f"unknown input '{tensor.name}' for model '{config.name}', expected "
                    f"{self._names(self._inputs)}"
                )
            if tensor.name in feeds:
                raise InvalidInputError(f"input '{tensor.name}' is given more than once")
            if tensor.datatype != spec.data_type:
                raise InvalidInputError(
                    f"input '{tensor.name}' has datatype {tensor.datatype}, model "
                    f"'{config.name}' expects {spec.data_type}"
                )
            shape = tuple(tensor.shape)
            data = tensor.data
            if data.size != element_count(shape):
                raise InvalidInputError(
                    f"input '{tensor.name}' has {data.size} elements, shape {list(shape)} needs "
                    f"{element_count(shape)}"
                )
            if config.batched:
                if not shape or not _dims_match(shape[1:], spec.dims):
                    raise InvalidInputError(
                        f"input '{tensor.name}' has shape {list(shape)}, model '{config.name}' "
                        f"expects {_expected_shape(config, spec)}"
                    )
                rows = shape[0]
                if rows < 1 or rows > config.max_batch_size:
                    raise InvalidInputError(
                        f"input '{tensor.name}' has batch size {rows}, model '{config.name}' "
                        f"accepts 1 to max_batch_size {config.max_batch_size}"
                    )
                if batch_size not in (-1, rows):
                    raise InvalidInputError(
                        f"input '{tensor.name}' has batch size {rows}, other inputs have "
                        f"{batch_size}: all inputs must share the batch dimension"
                    )
                batch_size = rows
            elif not _dims_match(shape, spec.dims):
                raise InvalidInputError(
                    f"input '{tensor.name}' has shape {list(shape)}, model '{config.name}' "
                    f"expects {_expected_shape(config, spec)}"
                )
            if spec.reshape is not None:
                shape = (shape[0], *spec.reshape) if config.batched else spec.reshape
            feeds[tensor.name] = data.reshape(shape) if data.shape != shape else data
        missing = [name for name in self._required if name not in feeds]
        if missing:
            raise InvalidInputError(
                f"model '{config.name}' is missing required input(s) {missing}, expected "
                f"{self._names(self._inputs)}"
            )
        return feeds, max(batch_size, 1)

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

    @staticmethod
    def _names(tensors: dict[str, TensorConfig]) -> str:
        return "one of " + ", ".join(f"'{n}'" for n in tensors) if tensors else "none"
