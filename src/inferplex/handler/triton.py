"""Triton's ``triton_python_backend_utils``, what a Triton Python model imports: the module of
that name (``src/triton_python_backend_utils.py``) is this one, so a model.py written for
Triton runs unchanged (``from inferplex.handler import triton as pb_utils`` is the same).

Requests, responses and tensors hold numpy arrays (BYTES: object arrays of ``bytes``).
``InferenceRequest(...).exec()`` calls another served model in-process (BLS);
``request.is_cancelled()`` tells whether a request's client went away;
``request.get_response_sender()`` sends a decoupled model's responses;
``await request.async_exec()`` in an ``async def execute`` runs calls at once. Not
supported: GPU tensors (``is_cpu()`` is always true) and the names of ``UNSUPPORTED``: a
model.py that uses one fails to load, naming it (``backends/python/compat.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Literal, overload

import numpy as np

from inferplex.errors import ErrorCode
from inferplex.handler import bls

# Triton's module has these names too (the "as" marks them re-exported)
from inferplex.handler.metrics import Metric as Metric
from inferplex.handler.metrics import MetricFamily as MetricFamily
from inferplex.handler.triton_config import ModelConfig as ModelConfig
from inferplex.handler.triton_config import get_input_config_by_name as get_input_config_by_name
from inferplex.handler.triton_config import get_output_config_by_name as get_output_config_by_name
from inferplex.handler.triton_config import (
    using_decoupled_model_transaction_policy as using_decoupled_model_transaction_policy,
)
from inferplex.handler.triton_types import TRITON_STRING_TO_NUMPY as TRITON_STRING_TO_NUMPY
from inferplex.handler.triton_types import TritonModelException as TritonModelException
from inferplex.handler.triton_types import deserialize_bytes_tensor as deserialize_bytes_tensor
from inferplex.handler.triton_types import numpy_to_triton_type as numpy_to_triton_type
from inferplex.handler.triton_types import serialize_byte_tensor as serialize_byte_tensor
from inferplex.handler.triton_types import triton_string_to_numpy as triton_string_to_numpy
from inferplex.handler.triton_types import triton_to_numpy_type as triton_to_numpy_type

#: names of Triton's module that this one lacks, and why: a model.py that uses one fails to
#: load with the reason (backends/python/compat.py), and reaching one raises AttributeError
UNSUPPORTED = {
    "load_model": "the model loading API (load models through the server's repository API)",
    "unload_model": "the model loading API (unload models through the server's repository API)",
    "is_model_ready": "the model loading API (ask the server's /v2/models/<m>/ready)",
    "PreferredMemory": "GPU tensors (tensors are in CPU memory here)",
    "TRITONSERVER_MEMORY_GPU": "GPU tensors (tensors are in CPU memory here)",
    "TRITONSERVER_MEMORY_CPU": "GPU tensors (tensors are in CPU memory here)",
}
#: Triton request methods ``InferenceRequest`` lacks (their calls in model.py are found the
#: same way)
UNSUPPORTED_METHODS = {
    "set_release_flags": "request rescheduling (sequence_batching { iterative_sequence })",
    "set_flags": "sequence flags on a BLS request (sequence batching)",
    "trace": "request traces",
}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

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
    bls.STOPPED: TritonError.CANCELLED,  # a BLS call stopped with cancel()
}


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

    def triton_dtype(self) -> int | None:
        """The TRITONSERVER_DataType number (FP32: 11, BYTES: 13)."""
        return numpy_to_triton_type(self._array.dtype)

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


#: the flag of a request's last response (``sender.send(flags=...)``), as Triton's
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class InferenceResponseSender:
    """Triton's response sender (``request.get_response_sender()``): a decoupled model sends
    a request's responses with it, from ``execute`` or from threads it starts, as they are
    ready; the last is sent with ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (a response,
    or None: no outputs). Each response reaches the client as it is sent; ``send`` waits
    while the client is ``--stream-queue-responses`` responses behind."""

    def __init__(
        self, emit: Callable[[InferenceResponse | None, bool], None], cancelled: Callable[[], bool]
    ) -> None:
        self._emit = emit
        self._cancelled = cancelled
        self._closed = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException(
                "Unable to send response. Response sender has been closed (a response flagged "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL was sent)."
            )
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise TritonModelException("send() without a response needs the final flag")
        self._closed = final
        self._emit(response, final)

    def is_cancelled(self) -> bool:
        """Whether the client went away (its responses are dropped from now on)."""
        return self._cancelled()


class InferenceRequest:
    """A request the model gets in ``execute``, or one it builds to call another model."""

    def __init__(
        self,
        model_name: str | bytes = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_version: int = -1,
        timeout: int = 0,
        request_id: str = "",
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        # Triton's takes bytes too: its BLS example names the model with a BYTES input's
        # element, as_numpy()[0]
        self._model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._inputs = list(inputs)
        self._outputs = list(requested_output_names)
        self._version = model_version
        self._timeout_us = timeout
        self._id = request_id
        self._parameters = json.loads(parameters) if isinstance(parameters, str) else parameters
        #: set on the requests a model gets in ``execute`` (``received``)
        self._cancelled: Callable[[], bool] | None = None
        self._sender: InferenceResponseSender | None = None

    @classmethod
    def received(
        cls,
        model_name: str,
        inputs: Sequence[Tensor],
        requested_output_names: Sequence[str],
        request_id: str,
        parameters: dict[str, Any],
        sender: InferenceResponseSender,
        cancelled: Callable[[], bool] | None,
    ) -> InferenceRequest:
        """A request as ``execute`` gets it (the worker makes these): with the sender of its
        responses and the check of whether its client went away (None: nothing can cancel
        it)."""
        request = cls(
            model_name, inputs, requested_output_names, request_id=request_id,
            parameters=parameters,
        )  # fmt: skip
        request._sender = sender
        request._cancelled = cancelled
        return request

    def is_cancelled(self) -> bool:
        """Whether the client of this request went away while the model runs it (a closed
        connection, a reset stream, its timeout), as Triton's (23.10+): its answer will be
        dropped, so the model may stop early (and answer it with an error, say
        ``TritonError.CANCELLED``). Once true it stays true; always False for a request the
        model builds itself. Reads a flag in shared memory: cheap enough to call in a loop."""
        check = self._cancelled
        return check is not None and check()

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses (a decoupled model's way to answer; a model
        that is not decoupled may use it too, for exactly one response, flagged final)."""
        if self._sender is None:
            raise TritonModelException("only a request the model gets in execute has a sender")
        return self._sender

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

    def correlation_id(self) -> int | str:
        """The id of the sequence the request belongs to (request parameter ``sequence_id``,
        a uint64 or a string, docs/sequences.md); 0 for a request of none."""
        value = (self._parameters or {}).get("sequence_id", 0)
        return value if isinstance(value, int | str) else 0

    def flags(self) -> int:
        """TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END of a sequence's first / last
        request (request parameters ``sequence_start`` / ``sequence_end``)."""
        parameters = self._parameters or {}
        start = TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if parameters.get("sequence_start") else 0
        end = TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if parameters.get("sequence_end") else 0
        return start | end

    @overload
    def exec(self, decoupled: Literal[False] = False) -> InferenceResponse: ...
    @overload
    def exec(self, decoupled: Literal[True]) -> bls.CallResponses[InferenceResponse]: ...
    @overload
    def exec(self, decoupled: bool) -> InferenceResponse | bls.CallResponses[InferenceResponse]: ...

    def exec(
        self, decoupled: bool = False
    ) -> InferenceResponse | bls.CallResponses[InferenceResponse]:
        """Run this request on the model it names, in-process; errors come back in the
        response, as in Triton. ``decoupled=True``: an iterator of the responses as the model
        sends them (a decoupled model's, ending with a final one that may have no outputs;
        an ordinary model's one), with ``cancel()``."""
        if decoupled:
            return bls.open_stream(bls.Call(self._model_name, *self._call()), _streamed)
        try:
            inputs, wanted, version, timeout = self._call()
            outputs = bls.infer(self._model_name, inputs, wanted, version=version, timeout=timeout)
        except bls.ModelCallError as exc:
            return _error_response(exc)
        return _response(outputs)

    def async_exec(self, decoupled: bool = False) -> asyncio.Future[Any]:
        """``exec`` in an ``async def execute``: a future of the response, started at once.
        The calls started before the model awaits run at once in the server (one message
        for all of them). ``decoupled=True``: a future of ``exec(decoupled=True)``'s
        iterator (``for`` or ``async for``)."""
        if decoupled:
            return bls.open_stream_async(bls.Call(self._model_name, *self._call()), _streamed)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[InferenceResponse] = loop.create_future()

        def settle(call: asyncio.Future[dict[str, np.ndarray]]) -> None:
            if answer.cancelled():
                return
            failure = call.exception()
            if isinstance(failure, bls.ModelCallError):
                answer.set_result(_error_response(failure))
            elif failure is not None:
                answer.set_exception(failure)
            else:
                answer.set_result(_response(call.result()))

        inputs, wanted, version, timeout = self._call()
        call = bls.infer_async(self._model_name, inputs, wanted, version=version, timeout=timeout)
        call.add_done_callback(settle)
        return answer

    def _call(self) -> tuple[dict[str, np.ndarray], list[str] | None, str, float | None]:
        """What ``bls.infer`` takes after the model name: inputs, outputs, version, timeout."""
        version = "" if self._version < 0 else str(self._version)
        timeout = self._timeout_us / 1e6 if self._timeout_us else None
        inputs = {t.name(): t.as_numpy() for t in self._inputs}
        return inputs, self._outputs or None, version, timeout


def _response(outputs: dict[str, np.ndarray]) -> InferenceResponse:
    return InferenceResponse([Tensor(name, array) for name, array in outputs.items()])


def _error_response(exc: bls.ModelCallError) -> InferenceResponse:
    return InferenceResponse(error=TritonError(exc.message, exc.code))


def _streamed(item: bls.Streamed) -> InferenceResponse:
    """One response of ``exec(decoupled=True)``: Triton's empty final one has no outputs."""
    if item.error is not None:
        return _error_response(item.error)
    return _response(item.outputs or {})


# the parameters have Triton's names: a model may pass them by keyword
def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)


class Logger:
    """Triton's ``pb_utils.Logger``: messages go to the server's log (stderr), at its level
    and in its format; ``log_verbose`` and ``VERBOSE`` are DEBUG (``--log-level debug``)."""

    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        _logger.log(level, message)

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


def __getattr__(name: str) -> Any:
    why = UNSUPPORTED.get(name)
    if why is None:
        raise AttributeError(f"module 'triton_python_backend_utils' has no attribute '{name}'")
    raise AttributeError(f"triton_python_backend_utils.{name} is not supported by inferplex: {why}")
