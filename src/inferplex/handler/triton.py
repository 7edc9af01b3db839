"""The parts of Triton's ``triton_python_backend_utils`` a model.py uses, so a Triton Python
model runs with one import changed (it was ``import triton_python_backend_utils as pb_utils``)::

    from inferplex.handler import triton as pb_utils

Requests, responses and tensors hold numpy arrays (BYTES: object arrays of ``bytes``).
``InferenceRequest(...).exec()`` calls another served model in-process (BLS). Not supported:
decoupled models (response senders), ``async_exec``, GPU tensors (``is_cpu()`` is always
true).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferplex.core.datatypes import TRITON_TO_V2, V2_TO_NUMPY
from inferplex.handler import bls

_logger = logging.getLogger("inferplex.handler")


class TritonError:
    """An error a model puts in a response (or that ``exec`` reports)."""

    def __init__(self, message: str, code: str = "internal") -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> str:
        return self._code


class TritonModelException(Exception):
    """What Triton raises for errors in its utilities."""


class Tensor:
    """A named numpy tensor."""

    def __init__(self, name: str, array: Any) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    @classmethod
    def from_dlpack(cls, name: str, tensor: Any) -> Tensor:
        """From any object with ``__dlpack__`` on the CPU (a torch tensor, for example)."""
        return cls(name, np.from_dlpack(tensor))


class InferenceResponse:
    """A model's answer to one request: output tensors, or an error."""

    def __init__(
        self, output_tensors: Sequence[Tensor] = (), error: TritonError | None = None
    ) -> None:
        self._outputs = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class InferenceRequest:
    """A request the model gets in ``execute``, or one it builds to call another model."""

    def __init__(
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_version: int = -1,
        timeout: int = 0,
        request_id: str = "",
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._model_name = model_name
        self._inputs = list(inputs)
        self._outputs = list(requested_output_names)
        self._version = model_version
        self._timeout_us = timeout
        self._id = request_id
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else parameters

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._version

    def request_id(self) -> str:
        return self._id

    def timeout(self) -> int:
        """Microseconds; 0 for none."""
        return self._timeout_us

    def parameters(self) -> str:
        return json.dumps(self._parameters or {})

    def exec(self) -> InferenceResponse:
        """Run this request on the model it names, in-process; errors come back in the
        response, as in Triton."""
        try:
            outputs = bls.infer(
                self._model_name,
                {t.name(): t.as_numpy() for t in self._inputs},
                self._outputs or None,
                version="" if self._version < 0 else str(self._version),
                timeout=self._timeout_us / 1e6 if self._timeout_us else None,
            )
        except bls.ModelCallError as exc:
            return InferenceResponse(error=TritonError(exc.message, exc.code))
        return InferenceResponse([Tensor(name, array) for name, array in outputs.items()])


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def _tensor_config(model_config: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next((t for t in model_config.get(kind, []) if t["name"] == name), {})


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any]:
    """The input's entry of the model config (``{}`` if there is none)."""
    return _tensor_config(model_config, "input", name)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any]:
    """The output's entry of the model config (``{}`` if there is none)."""
    return _tensor_config(model_config, "output", name)


def triton_string_to_numpy(type_string: str) -> type:
    """``"TYPE_FP32"`` -> ``numpy.float32`` (``TYPE_STRING`` -> ``numpy.object_``)."""
    try:
        return V2_TO_NUMPY[TRITON_TO_V2[type_string]].type
    except KeyError:
        raise TritonModelException(f"unknown Triton data type '{type_string}'") from None


class Logger:
    """Triton's ``pb_utils.Logger``: messages go to the server's log."""

    @staticmethod
    def log_info(message: str) -> None:
        _logger.info(message)

    @staticmethod
    def log_warn(message: str) -> None:
        _logger.warning(message)

    @staticmethod
    def log_error(message: str) -> None:
        _logger.error(message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _logger.debug(message)
