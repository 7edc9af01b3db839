"""The parts of Triton's ``triton_python_backend_utils`` a model.py uses, so a Triton Python
model runs with one import changed (it was ``import triton_python_backend_utils as pb_utils``)::

    from inferplex.handler import triton as pb_utils

Requests, responses and tensors hold numpy arrays (BYTES: object arrays of ``bytes``).
``InferenceRequest(...).exec()`` calls another served model in-process (BLS);
``request.is_cancelled()`` tells whether a request's client went away. Not supported:
decoupled models (response senders), ``async_exec``, GPU tensors (``is_cpu()`` is always
true).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from inferplex.datatypes import TRITON_TO_V2, V2_TO_NUMPY
from inferplex.errors import ErrorCode
from inferplex.handler import bls

_logger = logging.getLogger("inferplex.handler")


class TritonError:
    """An error a model puts in a response (or that ``exec`` reports), with Triton's codes:
    a response with ``TritonError("...", TritonError.INVALID_ARG)`` fails its request with
    400 / INVALID_ARGUMENT, as in Triton."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int | str = INTERNAL) -> None:
        self._message = message
        # the server's code names (ModelCallError.code: "not_found", ...) are taken too
        self._code = code if isinstance(code, int) else _FROM_SERVER_CODE.get(code, 1)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def server_code(self) -> ErrorCode:
        """The code the server answers a request this error fails with."""
        return _TO_SERVER_CODE.get(self._code, ErrorCode.INTERNAL)


_TO_SERVER_CODE = {
    TritonError.NOT_FOUND: ErrorCode.NOT_FOUND,
    TritonError.INVALID_ARG: ErrorCode.INVALID_ARGUMENT,
    TritonError.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    TritonError.UNSUPPORTED: ErrorCode.UNIMPLEMENTED,
    TritonError.ALREADY_EXISTS: ErrorCode.INVALID_ARGUMENT,
}
_FROM_SERVER_CODE = {
    ErrorCode.NOT_FOUND.value: TritonError.NOT_FOUND,
    ErrorCode.INVALID_ARGUMENT.value: TritonError.INVALID_ARG,
    ErrorCode.UNAVAILABLE.value: TritonError.UNAVAILABLE,
    ErrorCode.UNIMPLEMENTED.value: TritonError.UNSUPPORTED,
}


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
        # a legacy DLPack capsule (what torch.utils.dlpack.from_dlpack takes) cannot say
        # read-only, and numpy will not export a read-only array (a request's input is one)
        array = self._array if self._array.flags.writeable else self._array.copy()
        return array.__dlpack__()

    @classmethod
    def from_dlpack(cls, name: str, tensor: Any) -> Tensor:
        """From a CPU object with ``__dlpack__`` (a torch tensor, for example) or a DLPack
        capsule (``torch.utils.dlpack.to_dlpack(t)``, ``Tensor.to_dlpack()``), as Triton
        takes both."""
        if not hasattr(tensor, "__dlpack__"):
            tensor = _Capsule(tensor)
        return cls(name, np.from_dlpack(tensor))


class _Capsule:
    """A DLPack capsule dressed as the object numpy's ``from_dlpack`` asks for."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: GPU tensors are not supported here


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
        #: set by the worker on the requests a model gets in ``execute``
        self._cancelled: Callable[[], bool] | None = None

    def is_cancelled(self) -> bool:
        """Whether the client of this request went away while the model runs it (a closed
        connection, a reset stream, its timeout), as Triton's (23.10+): its answer will be
        dropped, so the model may stop early (and answer it with an error, say
        ``TritonError.CANCELLED``). Once true it stays true; always False for a request the
        model builds itself. Reads a flag in shared memory: cheap enough to call in a loop."""
        check = self._cancelled
        return check is not None and check()

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

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run this request on the model it names, in-process; errors come back in the
        response, as in Triton."""
        if decoupled:
            raise TritonModelException("exec(decoupled=True): decoupled models are not supported")
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
