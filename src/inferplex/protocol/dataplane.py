"""The data plane: the one door between the V2 codecs and the engine (MLServer's
``DataPlane``), for REST, gRPC and the in-process API.

A codec only translates: wire bytes to an :class:`InferenceRequest`, an
:class:`InferenceResponse` to wire bytes. What a request goes through on its way to the
engine is decided here, once, so the protocols cannot disagree:

- the checks of a decoded tensor: a known datatype, no negative dimension, raw data of the
  size its shape needs (:func:`input_dtype`, :func:`check_dims`, :func:`raw_size_error`);
- shared memory: an input read from the region it names, an output checked against and
  written to its region (:func:`shared_input`, :func:`requested_output`, :func:`shared_output`);
- the output parameters the server acts on, the classification extension among them
  (:func:`requested_output`);
- the request limits (:class:`RequestLimits`) and the model's checks of what each input
  declares, before a large tensor is decoded (:attr:`DataPlane.checks`);
- the routing key: the configured HTTP header, or the gRPC metadata key of the same name,
  becomes the request parameter ``routing_key`` (:meth:`DataPlane.route`).

The per-tensor checks are functions a codec calls in its one loop over the tensors, where it
meets each tensor's name, datatype and shape before decoding its data: the hot path makes no
second pass and builds nothing more. What concerns the decoded request as a whole runs in
:meth:`DataPlane.admit`, on the thread that decoded it (a large body's: a worker thread).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from inferplex.datatypes import V2_TO_NUMPY
from inferplex.errors import InvalidInputError
from inferplex.protocol.v2.checks import CheckFactory, declared_checks
from inferplex.routing.config import DEFAULT_STICKY_PARAMETER as ROUTING_KEY
from inferplex.security.limits import RequestLimits
from inferplex.shm.registry import REGION, SharedMemoryRegistry, require
from inferplex.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from inferplex.config.server_config import ServerConfig
    from inferplex.core.validation import RequestValidator

__all__ = [
    "CLASSIFICATION",
    "ROUTING_KEY",
    "DataPlane",
    "Engine",
    "check_dims",
    "input_dtype",
    "negative_dims",
    "raw_size_error",
    "requested_output",
    "shared_input",
    "shared_output",
    "unknown_datatype",
]

#: the output parameter of Triton's classification extension
CLASSIFICATION = "classification"


class Engine(Protocol):
    """What the data plane needs of the engine."""

    @property
    def shared_memory(self) -> SharedMemoryRegistry | None: ...

    def input_checks(self, name: str, version: str = "") -> RequestValidator | None: ...

    def infer(self, request: InferenceRequest) -> Awaitable[InferenceResponse]: ...


class DataPlane:
    """The requests of every protocol on their way to the engine: ``admit`` a decoded
    request, ``route`` it by the routing header's value if it came with one, then ``infer``
    it. Built once by the composition root and shared by the frontends (a frontend built
    alone makes its own)."""

    __slots__ = (
        "admit",
        "checks",
        "engine",
        "infer",
        "limits",
        "routing_header",
        "routing_metadata",
    )

    def __init__(self, engine: Engine, limits: RequestLimits, routing_header: str = "") -> None:
        """``routing_header``: the HTTP header (and gRPC metadata key) whose value becomes
        the request parameter ``routing_key``; empty for none."""
        self.engine = engine
        self.limits = limits
        #: the checks of a decoded request as a whole, run where it was decoded; raise an
        #: InferplexError to refuse it. Today the limits alone: bound, no call of its own
        self.admit = limits.check
        #: the engine's answer to an admitted request: the engine's own method, bound here
        #: (no call or coroutine of the plane's on the hot path)
        self.infer = engine.infer
        #: per input, what runs on its declared name, datatype and shape before a large
        #: tensor is decoded: the limits, then the model's checks
        self.checks: CheckFactory = declared_checks(limits, engine)
        key = routing_header.strip().lower()
        self.routing_header = key.encode("latin-1")  # HTTP header names arrive lower-case
        self.routing_metadata = key  # so do gRPC metadata keys

    @classmethod
    def from_config(cls, engine: Engine, config: ServerConfig) -> DataPlane:
        limits = RequestLimits(config.max_tensor_elements, config.max_string_bytes)
        return cls(engine, limits, config.routing_header)

    @property
    def shared_memory(self) -> SharedMemoryRegistry | None:
        return self.engine.shared_memory

    def route(self, request: InferenceRequest, routing_key: str) -> None:
        """``routing_key``, the value of the routing header (or gRPC metadata key), becomes
        the request parameter ``routing_key`` unless the request has one: a parameter the
        client wrote in the body wins. A new parameter dict: the decoded one may be shared
        with a codec's layout cache."""
        if ROUTING_KEY not in request.parameters:
            request.parameters = {**request.parameters, ROUTING_KEY: routing_key}

    async def infer_local(self, request: InferenceRequest) -> InferenceResponse:
        """The in-process API's way in (``Server.infer``): the request was built in Python,
        not decoded, so each tensor gets the checks a codec runs on a decoded one, then
        the request those of a decoded request."""
        shm = self.engine.shared_memory
        for tensor in request.inputs:
            input_dtype(tensor.name, tensor.datatype)
            check_dims(tensor.name, tuple(tensor.shape))
        for output in request.outputs:
            if output.parameters:
                requested_output(output.name, output.parameters, shm)
        self.admit(request)
        return await self.engine.infer(request)

    def routing_value(self, metadata: list[tuple[str, str | bytes]]) -> str | None:
        """The routing key in a gRPC call's metadata, if the call has one."""
        key = self.routing_metadata
        for name, value in metadata:
            if name == key:
                return value if isinstance(value, str) else value.decode("utf-8", "replace")
        return None


# ---- the checks of a decoded tensor ---------------------------------------------------------


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
    count = int(np.prod(shape, dtype=object)) if shape else 1
    expected = count * itemsize
    return InvalidInputError(
        f"input '{name}': {where} holds {nbytes} bytes, expected {expected}: shape "
        f"{list(shape)} of {datatype} needs {expected} bytes ({count} elements of {itemsize})"
    )


# ---- shared memory and output parameters -----------------------------------------------------


def shared_input(
    shm: SharedMemoryRegistry | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    shape: tuple[int, ...],
) -> np.ndarray:
    """The data of an input whose parameters name a shared-memory region."""
    return require(shm).read_input(name, parameters, datatype, shape)


def requested_output(
    name: str, parameters: Mapping[str, Any], shm: SharedMemoryRegistry | None
) -> None:
    """The checks of a requested output's parameters the server acts on, as the request
    arrives: the classification extension is refused (the same error over every protocol);
    a shared-memory region must be registered and large enough."""
    if parameters.get(CLASSIFICATION):
        raise InvalidInputError(
            f"output '{name}': the classification extension is not supported (parameter "
            f"'{CLASSIFICATION}'); request the output without it and take its top classes "
            "on the client"
        )
    if REGION in parameters:
        require(shm).check_output(name, parameters)


def shared_output(
    shm: SharedMemoryRegistry | None,
    name: str,
    parameters: Mapping[str, Any],
    datatype: str,
    data: np.ndarray,
) -> dict[str, Any]:
    """Write an output to the region its request named; returns the parameters that tell
    the client where it is."""
    return require(shm).write_output(name, parameters, datatype, data)
